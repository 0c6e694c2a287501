"""What a client session hands its consumer: every server event once, in order.

`SessionEvents` takes the frames the connection reads (duplex.py owns the
connection), drops what a replay repeats, keeps the session's facts as the
server last said them, and hands each event to the response it belongs to
(responses.py), to the listeners and to every open `events()` iterator;
then, once, the session's end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from antiphon.client import audio
from antiphon.client.errors import ProtocolError, SessionClosed
from antiphon.client.events import ErrorEvent, Event, SessionEnded, SessionEvent, parse
from antiphon.client.feed import Fanout, Feed
from antiphon.client.responses import ResponseHandle, ResponseRouter

# Frames the client logs in both directions (`on_frame`): "<" in, ">" out.
FrameLog = Callable[[str, dict[str, Any]], None]
Listener = Callable[[Event], None]
# Attachment-scoped events: their `server_event_seq` is a cursor, not a journal position.
_CURSOR_EVENTS = frozenset({"session.resumed", "session.replaced", "session.resync_required"})


class SessionEvents:
    def __init__(self, on_frame: FrameLog | None) -> None:
        self._on_frame = on_frame
        self._ended: str = ""  # why the session is over, once it is
        self._over = asyncio.Event()
        self._events: Fanout[Event] = Fanout()
        self._listeners: list[Listener] = []
        self._responses = ResponseRouter()
        # What the session is, as the server last said it.
        self.session: dict[str, Any] = {}
        self.session_id = ""
        self.resume_token = ""
        self.incarnation = 0
        self.last_seq = 0

    def subscribe(self) -> asyncio.Queue[Event | None]:
        """A queue of every event from now on (None once the session is over)."""
        return self._events.subscribe()

    def unsubscribe(self, queue: asyncio.Queue[Event | None]) -> None:
        self._events.unsubscribe(queue)

    def add_listener(self, listener: Listener) -> None:
        """`listener(event)` is called for every event, in the reader, as it arrives."""
        self._listeners.append(listener)

    def events(self) -> Feed[Event]:
        """Every server event from now on (from this call, not from the first
        `anext`), until the session is over."""
        return self._events.feed()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.events()

    async def wait_for(self, *types: str, timeout: float = 60) -> Event:
        """The next event of one of `types`; an `error` on the way raises `ProtocolError`."""
        async with asyncio.timeout(timeout), self.events() as events:
            async for event in events:
                if event.type in types:
                    return event
                if isinstance(event, ErrorEvent):
                    raise ProtocolError(event.raw)
        raise SessionClosed(self._ended)

    def responses(self) -> Feed[ResponseHandle]:
        """Each response created from now on (from this call), as it is created."""
        return self._responses.feed()

    async def next_response(self, timeout: float = 120) -> ResponseHandle:
        """The next response created, read to its end."""
        async with asyncio.timeout(timeout), self.responses() as responses:
            async for handle in responses:
                await handle.wait()
                return handle
        raise SessionClosed(self._ended)

    @property
    def active_response_id(self) -> str:
        """The response being said; "" when none is."""
        return self._responses.active_response_id

    @property
    def input_rate(self) -> int:
        return _rate(self.session, "input")

    @property
    def output_rate(self) -> int:
        return _rate(self.session, "output")

    # ------------------------------------------------------------ delivery
    def _receive(self, raw: dict[str, Any]) -> None:
        event = parse(raw, time.monotonic())
        if self._on_frame is not None:
            self._on_frame("<", raw)
        seq = event.seq
        # Only journaled events can come twice. An error no session journaled
        # carries seq 0, and the attachment-scoped events carry the cursor they
        # resumed from (a gateway's own fail-over forwards its `session.resumed`,
        # with the rotated token): neither is a replay, both must get through.
        if seq and event.type not in _CURSOR_EVENTS:
            if seq <= self.last_seq:
                return  # replayed twice: the consumer has it already
            self.last_seq = seq
        self._deliver(event)
        if isinstance(event, SessionEnded):
            self._end(event.reason)

    def _deliver(self, event: Event) -> None:
        if isinstance(event, SessionEvent):
            self.session = event.session or self.session
            self.session_id = event.session_id or self.session_id
            self.resume_token = str(event.raw.get("resume_token") or self.resume_token)
            self.incarnation = int(event.raw.get("incarnation") or self.incarnation)
        self._responses.route(event)
        for listener in self._listeners:
            listener(event)
        self._events.publish(event)

    def _end(self, reason: str) -> None:
        if self._ended:
            return
        self._ended = reason
        self._over.set()
        self._events.end()
        self._responses.end()

    @property
    def ended(self) -> str:
        """Why the session is over; "" while it is not."""
        return self._ended


def _rate(session: dict[str, Any], direction: str) -> int:
    fmt = ((session.get("audio") or {}).get(direction) or {}).get("format") or {}
    rate = fmt.get("rate") if isinstance(fmt, dict) else None
    return int(rate) if rate else audio.WIRE_RATE
