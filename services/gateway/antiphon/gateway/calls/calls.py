"""WebRTC calls, as OpenAI serves them: `POST /v1/realtime/calls`.

The client posts an SDP offer (raw `application/sdp`, or a multipart form
with `sdp` and a `session` config) with an API key or a client secret as
its bearer; the answer SDP comes back with `201` and the call's id in
`Location`. The caller's audio is Opus over RTP both ways, and the Realtime
events travel on the data channel the client opened, `oai-events`, in
OpenAI's dialect (call_socket.py says how a call carries a session). A page
of another origin may call (CORS), as OpenAI's API allows a browser with a
client secret.

`CallSocket` makes a call look like a WebSocket to `Connection`
(connection.ClientSocket), so the session tier sees the same typed stream:
limits, fail-over and drain work as they do.

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
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
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
from starlette.websockets import WebSocket

from antiphon.common.ids import new_id
from antiphon.gateway.calls.call_media import CallMedia
from antiphon.gateway.calls.call_socket import CallSocket
from antiphon.gateway.connection.client_socket import ClientSocket
from antiphon.gateway.edge.edge import Admitted, Edge, bounded_body, deny
from antiphon.gateway.edge.gate import Refusal
from antiphon.gateway.metrics import GatewayMetrics

log = logging.getLogger(__name__)

EVENTS_CHANNEL = "oai-events"
# An SDP offer is a few KB; a session config is instructions and tools.
MAX_OFFER_BYTES = 256 * 1024

Converse = Callable[[ClientSocket, Admitted], Awaitable[None]]


class OfferError(ValueError):
    """A call request without a usable offer."""


@dataclass
class _Call:
    peer: RTCPeerConnection
    socket: CallMedia
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
        both = ["POST", "OPTIONS"]
        return [
            Route("/v1/realtime/calls", self.cross_origin(self.create), methods=both),
            Route("/v1/realtime/calls/{id}/hangup", self.cross_origin(self.hangup), methods=both),
        ]

    def cross_origin(
        self, handler: Callable[[Request], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        """A page of another origin calls too (an app's own page with a client
        secret, as OpenAI's API allows): CORS preflights are answered, and
        every answer names the Origin it may be read by, with its `Location`.
        An Origin the gateway's `allowed_origins` does not list is refused
        (403) before any of it."""

        async def answer(request: Request) -> Response:
            origin = request.headers.get("origin")
            try:
                self._edge.gate.check_origin(request.headers)
            except Refusal as refusal:
                self._edge.refused(refusal, request.url.path)
                return JSONResponse(refusal.body(), refusal.status)
            if request.method == "OPTIONS":
                asked = request.headers.get("access-control-request-headers", "")
                response: Response = Response(
                    status_code=204,
                    headers={
                        "access-control-allow-methods": "POST, OPTIONS",
                        "access-control-allow-headers": asked or "authorization, content-type",
                        "access-control-max-age": "600",
                    },
                )
            else:
                response = await handler(request)
            if origin is not None:
                response.headers["access-control-allow-origin"] = origin
                response.headers["access-control-expose-headers"] = "Location"
                response.headers["vary"] = "Origin"
            return response

        return answer

    async def create(self, request: Request) -> Response:
        if self._draining():
            self._metrics.server_closes.labels("draining").inc()
            return JSONResponse({"status": "draining"}, status_code=503)
        full = self.refuse_if_full(request)
        if full is not None:
            return full
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

    def refuse_if_full(self, request: Request) -> Response | None:
        """The answer to a call past this gateway's `max_calls`, or None."""
        if len(self._calls) < self._max_calls:
            return None
        refusal = Refusal(
            429,
            "rate_limit_exceeded",
            "call_limit",
            f"this gateway holds at most {self._max_calls} calls; try another",
            "call_limit",
        )
        self._edge.refused(refusal, request.url.path)
        return JSONResponse(refusal.body(), refusal.status)

    async def _answer(
        self, offer: str, session: Mapping[str, Any] | None, request: Request, admitted: Admitted
    ) -> tuple[str, str]:
        socket = CallSocket(dict(request.query_params), self._media_timeout_s)
        if session:
            socket.open_with(session)
        return await self.place(offer, socket, admitted, self._converse(socket, admitted))

    async def place(
        self, offer: str, socket: CallMedia, admitted: Admitted, talk: Awaitable[None]
    ) -> tuple[str, str]:
        """A call of `offer` whose media feed `socket`, for as long as `talk`
        (the conversation over it) runs: its id and the answer SDP. Raises
        (closing `talk`) when the offer cannot be answered."""
        peer = RTCPeerConnection(RTCConfiguration(iceServers=self._ice_servers))

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
            if inspect.iscoroutine(talk):
                talk.close()  # never started
            raise
        call_id = new_id("rtc")
        call = _Call(peer, socket, admitted.principal.key_id)
        self._calls[call_id] = call
        call.task = asyncio.create_task(self._run(call_id, call, talk))
        return call_id, peer.localDescription.sdp

    async def _run(self, call_id: str, call: _Call, talk: Awaitable[None]) -> None:
        self._metrics.calls_active.inc()
        log.info("call started", extra={"call_id": call_id, "key_id": call.key_id})
        try:
            await talk
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
        if (
            call is None
            or call.key_id != admitted.principal.key_id
            or not isinstance(call.socket, CallSocket)  # GPT-Live's attach is a sideband
        ):
            await deny(ws, _NO_SUCH_CALL)
            return
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        await call.socket.attach(ws)

    async def hangup(self, request: Request) -> Response:
        call = self._calls.get(request.path_params["id"])
        # Hanging up opens nothing: who asks matters, not the key's limits.
        principal = self._edge.principal_of(request)
        if isinstance(principal, Response):
            return principal
        if call is None or call.key_id != principal.key_id:
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
    body = await bounded_body(request, MAX_OFFER_BYTES)
    if body is None:
        raise OfferError(f"an offer is limited to {MAX_OFFER_BYTES} bytes")
    sdp = body.decode(errors="replace")
    if not sdp.startswith("v=0"):
        raise OfferError("the body is not an SDP offer (application/sdp)")
    return sdp, None
