"""WebRTC calls, as OpenAI serves them: `POST /v1/realtime/calls`.

The client posts an SDP offer (raw `application/sdp`, or a multipart form
with `sdp` and a `session` config) with an API key or a client secret as
its bearer; the answer SDP comes back with `201` and the call's id in
`Location`. The caller's audio is Opus over RTP both ways, and the Realtime
events travel on the data channel the client opened, `oai-events`, in
OpenAI's dialect, exactly as a WebSocket carries them, but for the audio:
appends are made from the caller's track (call_audio.Microphone), and the
answer's `response.output_audio.delta` events are played on the call's
track instead of sent (call_audio.Speaker). As OpenAI's WebRTC does, the
channel also says `output_audio_buffer.started` / `.stopped` around what is
played, and `.cleared` when a barge-in dropped the rest; the item cut short
is then truncated where the caller stopped hearing it.

`CallSocket` makes a call look like a WebSocket to `Connection`
(connection.ClientSocket), so the session tier sees the same typed stream:
limits, fail-over, resume and drain work as they do. The session's audio
stays PCM16 at 24 kHz whatever a client asks (`session.update`'s formats are
dropped): a call's audio is Opus on the wire.

`POST /v1/realtime/calls/{call_id}/hangup` ends a call. A server may also
attach a WebSocket to a call, `/v1/realtime?call_id=...` with the key that
placed it: it gets every event the data channel gets, and what it sends is
the call's as if the caller had sent it (to answer tool calls, or update the
session, where the browser holds no secret worth keeping). A gateway holds
at most `max_calls` calls, and one whose media stopped for
`call_media_timeout_s` is ended.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiortc import (
    RTCConfiguration,
    RTCDataChannel,
    RTCIceServer,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamTrack
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.websockets import WebSocket, WebSocketDisconnect

from antiphon.common.ids import new_id
from antiphon.gateway.call_audio import SESSION_RATE, Microphone, Speaker
from antiphon.gateway.close_codes import CLOSE_NORMAL
from antiphon.gateway.connection import ClientSocket
from antiphon.gateway.edge import Admitted, Edge, deny
from antiphon.gateway.gate import Refusal
from antiphon.gateway.metrics import GatewayMetrics

log = logging.getLogger(__name__)

EVENTS_CHANNEL = "oai-events"
# Events an attached WebSocket may have unread before it is dropped.
WATCHER_BACKLOG = 4096
# An SDP offer is a few KB; a session config is instructions and tools.
MAX_OFFER_BYTES = 256 * 1024
_AUDIO_DELTA = "response.output_audio.delta"
_RECEIVE = "websocket.receive"

Converse = Callable[[ClientSocket, Admitted], Awaitable[None]]


class OfferError(ValueError):
    """A call request without a usable offer."""


@dataclass
class CallSocket:
    """One call as a `ClientSocket`: events on its data channel, audio on
    its tracks."""

    query: Mapping[str, str]
    media_timeout_s: float
    append_ms: int = 100
    speaker: Speaker = field(init=False)
    _inbox: asyncio.Queue[Mapping[str, Any]] = field(init=False)
    _channel: RTCDataChannel | None = field(init=False, default=None)
    _unsent: list[str] = field(init=False, default_factory=list)
    _listening: asyncio.Task[None] | None = field(init=False, default=None)
    _response_id: str = field(init=False, default="")
    # What the speaker was given since it was last quiet: [item_id, seconds].
    _queued: list[list[Any]] = field(init=False, default_factory=list)
    _watchers: list[asyncio.Queue[str | None]] = field(init=False, default_factory=list)
    ended_by: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.speaker = Speaker(on_drained=self._drained)
        self._inbox = asyncio.Queue()

    # ------------------------------------------------ what the call gives
    def open_with(self, session: Mapping[str, Any]) -> None:
        """The call request's `session` config: the client's first event."""
        self._from_client(json.dumps({"type": "session.update", "session": dict(session)}))

    def attach_channel(self, channel: RTCDataChannel) -> None:
        self._channel = channel
        channel.on("message", self._on_message)
        channel.on("close", lambda: self.end("channel_closed"))
        for text in self._unsent:
            channel.send(text)
        self._unsent.clear()

    def attach_microphone(self, track: MediaStreamTrack) -> None:
        if self._listening is None:
            microphone = Microphone(track, append_ms=self.append_ms)
            self._listening = asyncio.create_task(self._listen(microphone))

    def end(self, why: str) -> None:
        """The call is over (hangup, media gone, peer closed): the connection
        reads a disconnect next, and the attached sockets close."""
        if not self.ended_by:
            self.ended_by = why
            self._inbox.put_nowait({"type": "websocket.disconnect", "code": CLOSE_NORMAL})
            for watcher in self._watchers:
                watcher.put_nowait(None)

    async def attach(self, ws: WebSocket) -> None:
        """A server's WebSocket on this call, until either ends."""
        events: asyncio.Queue[str | None] = asyncio.Queue(WATCHER_BACKLOG)
        self._watchers.append(events)
        reading = asyncio.create_task(self._read_watcher(ws, events))
        try:
            while (text := await events.get()) is not None:
                await ws.send_text(text)
        finally:
            if events in self._watchers:
                self._watchers.remove(events)
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
                await reading
            with contextlib.suppress(Exception):
                await ws.close(CLOSE_NORMAL)

    async def _read_watcher(self, ws: WebSocket, events: asyncio.Queue[str | None]) -> None:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                if events in self._watchers:
                    self._watchers.remove(events)
                    events.put_nowait(None)
                return
            if message.get("text") is not None:
                self._from_client(message["text"])

    def _on_message(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            message = message.decode(errors="replace")
        self._from_client(message)

    def _from_client(self, text: str) -> None:
        self._inbox.put_nowait({"type": _RECEIVE, "text": _without_formats(text)})

    async def _listen(self, microphone: Microphone) -> None:
        try:
            async for pcm in microphone.appends(silent_after_s=self.media_timeout_s):
                audio = base64.b64encode(pcm).decode()
                event = {"type": "input_audio_buffer.append", "audio": audio}
                self._inbox.put_nowait({"type": _RECEIVE, "text": json.dumps(event)})
        except TimeoutError:
            self.end("media_timeout")
            return
        self.end("media_ended")

    # ------------------------------------------- ClientSocket, for Connection
    @property
    def query_params(self) -> Mapping[str, str]:
        return self.query

    async def receive(self) -> Mapping[str, Any]:
        return await self._inbox.get()

    async def send(self, kind: str, text: str) -> None:
        if kind == _AUDIO_DELTA:
            event = json.loads(text)
            if not self.speaker.playing:
                self._response_id = event.get("response_id", "")
                self._say("output_audio_buffer.started", response_id=self._response_id)
            pcm = base64.b64decode(event["delta"])
            self.speaker.play(pcm)
            self._queue(event.get("item_id", ""), len(pcm) / 2 / SESSION_RATE)
            return
        if kind == "input_audio_buffer.speech_started" and self.speaker.playing:
            self._truncate_unheard(self.speaker.clear())
            self._say("output_audio_buffer.cleared", response_id=self._response_id)
        self._send_text(text)

    async def close(self, code: int, reason: str | None) -> None:
        self.end(reason or "closed")
        self.speaker.stop()
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening

    # ------------------------------------------------------------ helpers
    def _queue(self, item_id: str, seconds: float) -> None:
        if self._queued and self._queued[-1][0] == item_id:
            self._queued[-1][1] += seconds
        else:
            self._queued.append([item_id, seconds])

    def _truncate_unheard(self, dropped_s: float) -> None:
        """The caller heard only what was played: each item cut short is
        truncated there, as a WebSocket client does from its own playback
        (the server knows what a call played; a socket's client must say)."""
        played = sum(seconds for _item, seconds in self._queued) - dropped_s
        for item_id, seconds in self._queued:
            heard = min(seconds, max(0.0, played))
            played -= heard
            if heard < seconds and item_id:
                self._from_client(
                    json.dumps(
                        {
                            "type": "conversation.item.truncate",
                            "item_id": item_id,
                            "content_index": 0,
                            "audio_end_ms": int(heard * 1000),
                        }
                    )
                )
        self._queued.clear()

    def _drained(self) -> None:
        self._queued.clear()
        self._say("output_audio_buffer.stopped", response_id=self._response_id)

    def _say(self, kind: str, **fields: Any) -> None:
        self._send_text(json.dumps({"type": kind, "event_id": new_id("event"), **fields}))

    def _send_text(self, text: str) -> None:
        for watcher in list(self._watchers):
            if watcher.full():
                # A watcher that does not read its events is dropped, not waited for.
                self._watchers.remove(watcher)
                watcher.get_nowait()
                watcher.put_nowait(None)
            else:
                watcher.put_nowait(text)
        channel = self._channel
        if channel is None:
            self._unsent.append(text)  # the client's channel is not open yet
        elif channel.readyState == "open":
            channel.send(text)


def _without_formats(text: str) -> str:
    """A call's audio formats are the wire's (Opus), never the client's to set:
    a `session.update` loses its audio formats (other events pass as sent)."""
    try:
        event = json.loads(text)
    except ValueError:
        return text
    if not isinstance(event, dict) or event.get("type") != "session.update":
        return text
    session = event.get("session")
    if not isinstance(session, dict):
        return text
    for key in ("input_audio_format", "output_audio_format"):
        session.pop(key, None)
    audio = session.get("audio")
    if isinstance(audio, dict):
        for side in ("input", "output"):
            if isinstance(audio.get(side), dict):
                audio[side].pop("format", None)
    return json.dumps(event)


@dataclass
class _Call:
    peer: RTCPeerConnection
    socket: CallSocket
    key_id: str
    task: asyncio.Task[None] | None = None


class Calls:
    """The gateway's WebRTC calls: their routes, and every call until it ends."""

    def __init__(
        self,
        edge: Edge,
        metrics: GatewayMetrics,
        converse: Converse,
        *,
        draining: Callable[[], bool],
        max_calls: int,
        media_timeout_s: float,
        ice_servers: list[str],
    ) -> None:
        self._edge = edge
        self._metrics = metrics
        self._converse = converse
        self._draining = draining
        self._max_calls = max_calls
        self._media_timeout_s = media_timeout_s
        self._ice_servers = [RTCIceServer(url) for url in ice_servers]
        self._calls: dict[str, _Call] = {}

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/realtime/calls", self.create, methods=["POST"]),
            Route("/v1/realtime/calls/{call_id}/hangup", self.hangup, methods=["POST"]),
        ]

    @property
    def active(self) -> int:
        return len(self._calls)

    async def create(self, request: Request) -> Response:
        if self._draining():
            self._metrics.server_closes.labels("draining").inc()
            return JSONResponse({"status": "draining"}, status_code=503)
        if len(self._calls) >= self._max_calls:
            refusal = Refusal(
                429,
                "rate_limit_exceeded",
                "call_limit",
                f"this gateway holds at most {self._max_calls} calls; try another",
                "call_limit",
            )
            self._edge.refused(refusal, request.url.path)
            return JSONResponse(refusal.body(), refusal.status)
        try:
            offer, session = await _offer(request)
        except OfferError as err:
            bad = _bad_offer(str(err))
            self._edge.refused(bad, request.url.path)
            return JSONResponse(bad.body(), 400)
        admitted = self._edge.admit_request(request)
        if isinstance(admitted, Response):
            return admitted
        try:
            call_id, answer = await self._answer(offer, session, request, admitted)
        except Exception as exc:
            admitted.lease.release()
            bad = _bad_offer(f"the offer could not be answered: {exc}")
            self._edge.refused(bad, request.url.path, admitted.principal.key_id)
            return JSONResponse(bad.body(), 400)
        return Response(
            answer,
            status_code=201,
            media_type="application/sdp",
            headers={"location": f"/v1/realtime/calls/{call_id}"},
        )

    async def _answer(
        self, offer: str, session: Mapping[str, Any] | None, request: Request, admitted: Admitted
    ) -> tuple[str, str]:
        peer = RTCPeerConnection(RTCConfiguration(iceServers=self._ice_servers))
        socket = CallSocket(dict(request.query_params), self._media_timeout_s)
        if session:
            socket.open_with(session)

        @peer.on("datachannel")
        def on_channel(channel: RTCDataChannel) -> None:
            if channel.label == EVENTS_CHANNEL:
                socket.attach_channel(channel)

        @peer.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            if track.kind == "audio":
                socket.attach_microphone(track)

        @peer.on("connectionstatechange")
        def on_state() -> None:
            if peer.connectionState in ("failed", "closed"):
                socket.end(f"peer_{peer.connectionState}")

        try:
            await peer.setRemoteDescription(RTCSessionDescription(offer, "offer"))
            peer.addTrack(socket.speaker)
            await peer.setLocalDescription(await peer.createAnswer())
        except BaseException:
            await peer.close()
            raise
        call_id = new_id("rtc")
        call = _Call(peer, socket, admitted.principal.key_id)
        self._calls[call_id] = call
        call.task = asyncio.create_task(self._run(call_id, call, admitted))
        return call_id, peer.localDescription.sdp

    async def _run(self, call_id: str, call: _Call, admitted: Admitted) -> None:
        self._metrics.calls_active.inc()
        log.info("call started", extra={"call_id": call_id, "key_id": call.key_id})
        try:
            await self._converse(call.socket, admitted)
        finally:
            await call.peer.close()
            self._calls.pop(call_id, None)
            self._metrics.calls_active.dec()
            self._metrics.calls_ended.labels(call.socket.ended_by or "closed").inc()
            log.info("call ended", extra={"call_id": call_id, "why": call.socket.ended_by})

    async def attach(self, ws: WebSocket) -> None:
        """`/v1/realtime?call_id=...`: a WebSocket on a call of the same key."""
        admitted = await self._edge.admit_socket(ws)
        if admitted is None:
            return
        admitted.lease.release()  # watching a call opens no session
        call = self._calls.get(ws.query_params.get("call_id", ""))
        if call is None or call.key_id != admitted.principal.key_id:
            await deny(ws, _NO_SUCH_CALL)
            return
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        await call.socket.attach(ws)

    async def hangup(self, request: Request) -> Response:
        call = self._calls.get(request.path_params["call_id"])
        admitted = self._edge.admit_request(request)
        if isinstance(admitted, Response):
            return admitted
        admitted.lease.release()  # asking is not a session: only who asks matters
        if call is None or call.key_id != admitted.principal.key_id:
            return JSONResponse(_NO_SUCH_CALL.body(), _NO_SUCH_CALL.status)
        call.socket.end("hangup")
        return Response(status_code=200)

    async def close(self) -> None:
        """Every call ends (the gateway stops)."""
        for call in list(self._calls.values()):
            call.socket.end("gateway_stopped")
        tasks = [c.task for c in self._calls.values() if c.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=5)


_NO_SUCH_CALL = Refusal(
    404, "invalid_request_error", "call_not_found", "no such call", "invalid_request"
)


def _bad_offer(message: str) -> Refusal:
    return Refusal(400, "invalid_request_error", "invalid_offer", message, "invalid_request")


async def _offer(request: Request) -> tuple[str, Mapping[str, Any] | None]:
    """The offer SDP and the optional session config, from either shape."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        async with request.form(max_files=0, max_fields=4, max_part_size=MAX_OFFER_BYTES) as form:
            sdp, session = form.get("sdp"), form.get("session")
            if not isinstance(sdp, str):
                raise OfferError("the form's `sdp` field is missing")
            if session is None:
                return sdp, None
            try:
                config = json.loads(str(session))
            except ValueError as exc:
                raise OfferError("the form's `session` field is not JSON") from exc
            if not isinstance(config, dict):
                raise OfferError("the form's `session` field must be a JSON object")
            return sdp, config
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_OFFER_BYTES:
            raise OfferError(f"an offer is limited to {MAX_OFFER_BYTES} bytes")
    sdp = body.decode(errors="replace")
    if not sdp.startswith("v=0"):
        raise OfferError("the body is not an SDP offer (application/sdp)")
    return sdp, None
