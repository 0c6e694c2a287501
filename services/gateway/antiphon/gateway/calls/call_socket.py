"""A WebRTC call as a `ClientSocket` (connection.py): the session's events
on the call's `oai-events` data channel, its audio on the call's tracks.

To `Connection` a call looks like a WebSocket: `receive` gives the caller's
data channel messages, and its microphone track's audio as typed appends of
raw PCM (call_audio.Microphone); `send` writes every event to the channel,
and the answer's audio comes as the session typed it (`audio_out`) to be
played on the call's track (call_audio.Speaker): audio is never JSON here.
Around that audio the channel says `output_audio_buffer.started` /
`.stopped`, and `.cleared` when a barge-in dropped the rest, after which the
item cut short is truncated where the caller stopped hearing it. A
server's WebSocket may watch and drive the call (`attach`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiortc import RTCDataChannel
from aiortc.mediastreams import MediaStreamTrack
from starlette.websockets import WebSocket, WebSocketDisconnect

from antiphon.common.ids import new_id
from antiphon.gateway.calls.call_audio import SESSION_RATE, Microphone, Speaker
from antiphon.gateway.connection.close_codes import CLOSE_NORMAL
from antiphon.v1 import session_pb2 as spb

# Events an attached WebSocket may have unread before it is dropped.
WATCHER_BACKLOG = 4096
# Client events a call may have waiting for its session stream (the caller's
# appends come in real time; a data channel that floods past this ends the
# call, as a WebSocket's reader would stop reading).
INBOX_LIMIT = 1024
_RECEIVE = "websocket.receive"
# What a microphone's piece is to the session: the append a client would send.
_APPEND = "input_audio_buffer.append"


@dataclass
class CallSocket:
    """One call as a `ClientSocket`: events on its data channel, audio on
    its tracks."""

    query: Mapping[str, str]
    media_timeout_s: float
    append_ms: int = 100
    speaker: Speaker = field(init=False)
    _inbox: asyncio.Queue[Mapping[str, Any] | spb.ClientCommand] = field(init=False)
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
            for watcher in list(self._watchers):
                self._let_go(watcher)

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
                self._let_go(events)
                return
            if message.get("text") is not None:
                self._from_client(message["text"])

    def _on_message(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            message = message.decode(errors="replace")
        self._from_client(message)

    def _from_client(self, text: str) -> None:
        if self.ended_by:
            return
        if self._inbox.qsize() >= INBOX_LIMIT:
            self.end("flooded")
            return
        self._inbox.put_nowait({"type": _RECEIVE, "text": _without_formats(text)})

    async def _listen(self, microphone: Microphone) -> None:
        try:
            async for pcm in microphone.appends(silent_after_s=self.media_timeout_s):
                append = spb.AppendAudio(pcm16=pcm, sample_rate_hz=SESSION_RATE)
                command = spb.ClientCommand(client_type=_APPEND, append_audio=append)
                self._inbox.put_nowait(command)
        except TimeoutError:
            self.end("media_timeout")
            return
        self.end("media_ended")

    # ------------------------------------------- ClientSocket, for Connection
    @property
    def query_params(self) -> Mapping[str, str]:
        return self.query

    @property
    def audio_out(self) -> CallSocket:
        return self

    async def receive(self) -> Mapping[str, Any] | spb.ClientCommand:
        return await self._inbox.get()

    def play(self, delta: spb.AudioDelta) -> None:
        """The answer's audio, on the call's track (`audio_out`)."""
        if not self.speaker.playing:
            self._response_id = delta.ref.response_id
            self._say("output_audio_buffer.started", response_id=self._response_id)
        self.speaker.play(delta.audio)
        self._queue(delta.ref.item_id, len(delta.audio) / 2 / SESSION_RATE)

    async def send(self, kind: str, text: str) -> None:
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

    def _let_go(self, watcher: asyncio.Queue[str | None]) -> None:
        """An attached socket is told to close (its last event may make room)."""
        if watcher in self._watchers:
            self._watchers.remove(watcher)
            if watcher.full():
                watcher.get_nowait()
            watcher.put_nowait(None)

    def _drained(self) -> None:
        self._queued.clear()
        self._say("output_audio_buffer.stopped", response_id=self._response_id)

    def _say(self, kind: str, **fields: Any) -> None:
        self._send_text(json.dumps({"type": kind, "event_id": new_id("event"), **fields}))

    def _send_text(self, text: str) -> None:
        for watcher in list(self._watchers):
            if watcher.full():
                # A watcher that does not read its events is dropped, not waited for.
                self._let_go(watcher)
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
