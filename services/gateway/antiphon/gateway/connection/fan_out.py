"""A connection's events copied to the sockets that watch it (a server's
WebSocket on a Realtime call, a GPT-Live sideband).

Each watcher has a bounded queue of the frames it has not sent yet, then
None when it must close. One that does not keep up is dropped, not waited
for: the connection's own client never waits on a watcher.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from starlette.websockets import WebSocket, WebSocketDisconnect

from antiphon.gateway.connection.close_codes import CLOSE_NORMAL

Events = asyncio.Queue[str | None]


class FanOut:
    def __init__(self, backlog: int) -> None:
        self._backlog = backlog
        self._watchers: list[Events] = []
        self.closed = False

    def __len__(self) -> int:
        return len(self._watchers)

    def watch(self) -> Events:
        """A new watcher's queue (closed at once if the connection has ended)."""
        events: Events = asyncio.Queue(self._backlog)
        if self.closed:
            events.put_nowait(None)
        else:
            self._watchers.append(events)
        return events

    def unwatch(self, events: Events) -> None:
        """The watcher is told to close (its last frame may make room)."""
        if events in self._watchers:
            self._watchers.remove(events)
            if events.full():
                events.get_nowait()
            events.put_nowait(None)

    def send(self, text: str) -> None:
        for watcher in list(self._watchers):
            if watcher.full():
                self.unwatch(watcher)
            else:
                watcher.put_nowait(text)

    def close(self) -> None:
        """The connection ended: every watcher is let go, after what it has."""
        self.closed = True
        for watcher in list(self._watchers):
            self.unwatch(watcher)


async def relay(ws: WebSocket, fan_out: FanOut, heard: Callable[[str, Events], None]) -> None:
    """A watcher's socket until either side ends: the connection's frames go
    out on it, and each text it sends goes to `heard` (with its own queue,
    which answers it alone or lets it go). The socket is closed at the end."""
    events = fan_out.watch()

    async def read() -> None:
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                fan_out.unwatch(events)
                return
            if (text := message.get("text")) is not None:
                heard(text, events)

    reading = asyncio.create_task(read())
    try:
        while (text := await events.get()) is not None:
            await ws.send_text(text)
    finally:
        fan_out.unwatch(events)
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
            await reading
        with contextlib.suppress(Exception):
            await ws.close(CLOSE_NORMAL)
