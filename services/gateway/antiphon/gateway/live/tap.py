"""One GPT-Live connection as its sidebands see it (`/v1/live/sessions/{id}/attach`).

A sideband (OpenAI's name: a trusted server beside a browser's WebRTC
session) gets every server event the connection's client gets, and two
things the client does not:

- the input audio, reflected as it arrived and before any mute, as the
  server event `session.input_audio.append` (the SDK's
  `SessionInputAudioAppend`: base64 PCM16 mono at 24 kHz, no `event_id`);
- the output track as `session.output_audio.delta`s in PCM16 mono at 24 kHz
  with `start_ms` / `end_ms` on the timeline (the client's own deltas are in
  its format and carry no span, and a WebRTC client gets none at all: the
  track plays on its call).

What a sideband sends is the connection's as if its client had sent it
(`TappedSocket.receive`), so the session tier never knows a sideband exists.

`Tap` is fed by the connection (`sent` for each frame its client gets, from
`LiveState` for the audio) and fans out to bounded queues, one per sideband;
a sideband that does not read is dropped, not waited for. Nothing here runs
while no sideband is attached but a sample count (the spans must be right
for one that attaches later).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from antiphon.common.audio import StreamResampler
from antiphon.gateway.connection.client_socket import AudioOut, ClientSocket
from antiphon.gateway.connection.fan_out import Events, FanOut
from antiphon.gateway.live.track_format import TRACK_RATE
from antiphon.v1 import session_pb2 as spb

# Events a sideband may have unread before it is dropped (a second of
# reflected audio is ~20 events, so this is minutes of a session).
SIDEBAND_BACKLOG = 4096
# Sideband events waiting for the connection's reader; past it a sideband
# that floods is dropped (the client's own socket is slowed by TCP instead).
INBOX_LIMIT = 256
_RECEIVE = "websocket.receive"
_DELTA = "session.output_audio.delta"
_MS = TRACK_RATE // 1000


class Tap:
    """What one connection's sidebands receive, and what they send it."""

    def __init__(self, key_id: str, on_started: Callable[[Tap], None] = lambda tap: None) -> None:
        self.key_id = key_id
        self.session_id = ""
        self._on_started = on_started
        self._watchers = FanOut(SIDEBAND_BACKLOG)
        self.inbox: asyncio.Queue[str] = asyncio.Queue()
        self._track = 0  # samples of the output track so far
        self._resampler: StreamResampler | None = None

    # ---------------------------------------------------- the connection
    def sent(self, kind: str, text: str) -> None:
        """A frame the client got: the sidebands get it too, but the client's
        audio deltas, which they get as the track itself (`track`)."""
        if kind == "session.started" and not self.session_id:
            self.session_id = json.loads(text)["session"]["id"]
            self._on_started(self)
        if kind != _DELTA:
            self._watchers.send(text)

    def heard(self, pcm16: bytes, rate: int) -> None:
        """The client's audio, as it arrived (before any mute), at `rate`."""
        if not self._watchers:
            return
        if self._resampler is None or self._resampler.in_rate != rate:
            self._resampler = StreamResampler(rate, TRACK_RATE)
        audio = self._resampler.process(pcm16)
        if audio:
            self._watchers.send(
                json.dumps(
                    {
                        "type": "session.input_audio.append",
                        "audio": base64.b64encode(audio).decode(),
                    }
                )
            )

    def track(self, convert: Callable[[bytes], bytes]) -> Callable[[bytes], bytes]:
        """`convert` (the track's chunk in the client's format), seeing each
        chunk of the track first: the timeline calls it once per chunk, in
        order, so counting its samples places each chunk on the timeline."""

        def tapped(pcm16: bytes) -> bytes:
            start = self._track
            self._track += len(pcm16) // 2
            if self._watchers:
                delta = {
                    "type": _DELTA,
                    "delta": base64.b64encode(pcm16).decode(),
                    "start_ms": start // _MS,
                    "end_ms": self._track // _MS,
                }
                self._watchers.send(json.dumps(delta))
            return convert(pcm16)

        return tapped

    def close(self) -> None:
        """The connection ended: every sideband is let go (after what it has)."""
        self._watchers.close()

    # ---------------------------------------------------------- sidebands
    @property
    def sidebands(self) -> int:
        """Sidebands attached now."""
        return len(self._watchers)

    @property
    def fan_out(self) -> FanOut:
        """The sidebands' queues (connection.fan_out.relay serves each)."""
        return self._watchers

    def watch(self) -> Events:
        """A new sideband's queue: frames, then None when it must close."""
        return self._watchers.watch()

    def unwatch(self, events: Events) -> None:
        self._watchers.unwatch(events)

    def from_sideband(self, text: str, events: Events) -> None:
        """A client event a sideband sent, for the connection's reader."""
        if self.inbox.qsize() >= INBOX_LIMIT:
            self._watchers.unwatch(events)
            return
        self.inbox.put_nowait(text)


class TappedSocket:
    """A GPT-Live client's socket (a WebSocket, a WebRTC call) with its tap:
    what the connection sends goes to the sidebands too, and what it reads
    is the client's events and the sidebands', in arrival order."""

    def __init__(self, inner: ClientSocket, tap: Tap) -> None:
        self._inner = inner
        self._tap = tap
        # Both pending reads outlive a receive that the other one answered:
        # none is made and cancelled per event (the client's audio comes ten
        # times a second, with or without a sideband).
        self._reading: asyncio.Task[Mapping[str, Any] | spb.ClientCommand] | None = None
        self._sideband: asyncio.Task[str] | None = None

    @property
    def query_params(self) -> Mapping[str, str]:
        return self._inner.query_params

    @property
    def audio_out(self) -> AudioOut | None:
        return self._inner.audio_out

    async def receive(self) -> Mapping[str, Any] | spb.ClientCommand:
        if not self._tap.inbox.empty():
            return {"type": _RECEIVE, "text": self._tap.inbox.get_nowait()}
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._inner.receive())
        if self._sideband is None:
            self._sideband = asyncio.ensure_future(self._tap.inbox.get())
        await asyncio.wait({self._reading, self._sideband}, return_when=asyncio.FIRST_COMPLETED)
        if self._sideband.done():
            sideband, self._sideband = self._sideband, None
            return {"type": _RECEIVE, "text": sideband.result()}
        reading, self._reading = self._reading, None
        return reading.result()

    async def send(self, kind: str, text: str) -> None:
        self._tap.sent(kind, text)
        await self._inner.send(kind, text)

    async def close(self, code: int, reason: str | None) -> None:
        for pending in (self._reading, self._sideband):
            if pending is not None:
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending
        await self._inner.close(code, reason)
