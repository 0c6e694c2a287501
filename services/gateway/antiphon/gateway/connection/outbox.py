"""The frames one socket has yet to write, bounded in bytes.

The writer takes frames as fast as the client reads them (the socket's
send waits while the transport's buffer is full), so a client that stops
reading leaves them here. Past `limit_bytes` the outbox refuses the frame
and the connection closes the slow reader with `slow_consumer`: its memory
is bounded by the limit, whatever the session produces. What it missed is
in the session's journal; a resume replays it.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from typing import Any

from antiphon.gateway.metrics import GatewayMetrics

Frame = tuple[str, str]  # (event type, JSON text)


class Outbox:
    def __init__(self, metrics: GatewayMetrics, *, limit_bytes: int) -> None:
        self._metrics = metrics
        self.limit_bytes = limit_bytes
        self._frames: deque[Frame | None] = deque()
        self._bytes = 0
        self._ready = asyncio.Event()
        self.closed = False

    @property
    def bytes(self) -> int:
        return self._bytes

    def put(self, event: dict[str, Any]) -> bool:
        """Queue one event; False when it would take the backlog past the limit
        (nothing is queued then), or the outbox is closed."""
        if self.closed:
            return False
        text = json.dumps(event, separators=(",", ":"))
        if self._bytes + len(text) > self.limit_bytes:
            return False
        self._frames.append((event["type"], text))
        self._grow(len(text))
        return True

    def close(
        self, last: list[dict[str, Any]] | None = None, *, drop_backlog: bool = False
    ) -> None:
        """No more frames after `last` (a goodbye the limit does not refuse);
        `drop_backlog`: forget what the client has not read (a slow reader's
        backlog, which its journal keeps), so that `last` goes out next."""
        if self.closed:
            return
        self.closed = True
        if drop_backlog:
            self._grow(-self._bytes)
            self._frames.clear()
        for event in last or []:
            text = json.dumps(event, separators=(",", ":"))
            self._frames.append((event["type"], text))
            self._grow(len(text))
        self._frames.append(None)
        self._ready.set()

    async def get(self) -> Frame | None:
        """The next frame; None once closed and written out."""
        while not self._frames:
            self._ready.clear()
            await self._ready.wait()
        frame = self._frames.popleft()
        if frame is not None:
            self._grow(-len(frame[1]))
        return frame

    def discard(self) -> None:
        """The socket is gone: what was never written is forgotten."""
        self.closed = True
        self._grow(-self._bytes)
        self._frames.clear()

    def _grow(self, n: int) -> None:
        self._bytes += n
        self._metrics.outbox_bytes.inc(n)
        if n > 0:
            self._metrics.note_outbox(self._bytes)
        if self._frames:
            self._ready.set()
