"""The frames one socket has yet to write, bounded in bytes, and how it closes.

The writer takes frames as fast as the client reads them (the socket's
send waits while the transport's buffer is full), so a client that stops
reading leaves them here. Past `limit_bytes` the outbox refuses the frame
and the connection closes the slow reader with `slow_consumer`: its memory
is bounded by the limit, whatever the session produces. What it missed is
in the session's journal; a resume replays it.

A frame is an event's JSON text, or an answer's audio as the session typed
it, for a socket that plays audio itself (a WebRTC call's track): it keeps
its place among the events, and is never made JSON. The connection's
`Closing` comes out last, after the frames before it, so the writer closes
with the code and reason the connection closed with.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

from antiphon.gateway.connection.connection_state import Closing
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.v1 import session_pb2 as spb

# (event type, its JSON text), or the typed audio a socket plays itself.
Frame = tuple[str, str] | spb.AudioDelta


class Outbox:
    def __init__(self, metrics: GatewayMetrics, *, limit_bytes: int) -> None:
        self._metrics = metrics
        self.limit_bytes = limit_bytes
        self._frames: deque[Frame | Closing] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()

    @property
    def bytes(self) -> int:
        return self._bytes

    def put(self, event: dict[str, Any]) -> bool:
        """Queue one event; False when it would take the backlog past the limit
        (nothing is queued then)."""
        text = json.dumps(event, separators=(",", ":"))
        return self._add((event["type"], text), len(text))

    def put_audio(self, delta: spb.AudioDelta) -> bool:
        """Queue an answer's audio for a socket that plays it; False as `put`."""
        return self._add(delta, len(delta.audio))

    def close(
        self,
        closing: Closing,
        last: list[dict[str, Any]] | None = None,
        *,
        drop_backlog: bool = False,
    ) -> None:
        """No more frames after `last` (a goodbye the limit does not refuse),
        then `closing`; `drop_backlog`: forget what the client has not read (a
        slow reader's backlog, which its journal keeps), so that `last` goes
        out next."""
        if drop_backlog:
            self._grow(-self._bytes)
            self._frames.clear()
        for event in last or []:
            text = json.dumps(event, separators=(",", ":"))
            self._frames.append((event["type"], text))
            self._grow(len(text))
        self._frames.append(closing)
        self._ready.set()

    async def get(self) -> Frame | Closing:
        """The next frame; the connection's `Closing` once the last was written."""
        while not self._frames:
            self._ready.clear()
            await self._ready.wait()
        frame = self._frames.popleft()
        if not isinstance(frame, Closing):
            self._grow(-_size(frame))
        return frame

    def discard(self) -> None:
        """The socket is gone: what was never written is forgotten."""
        self._grow(-self._bytes)
        self._frames.clear()

    def _add(self, frame: Frame, size: int) -> bool:
        if self._bytes + size > self.limit_bytes:
            return False
        self._frames.append(frame)
        self._grow(size)
        return True

    def _grow(self, n: int) -> None:
        self._bytes += n
        self._metrics.outbox_bytes.inc(n)
        if n > 0:
            self._metrics.note_outbox(self._bytes)
        if self._frames:
            self._ready.set()


def _size(frame: Frame) -> int:
    return len(frame.audio) if isinstance(frame, spb.AudioDelta) else len(frame[1])
