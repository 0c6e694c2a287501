"""Which stream speaks for the client now, and how long a session waits without one.

Each stream that opens or resumes the session becomes the attachment, with
the next generation number; the one it replaces is told so and ended, and
commands still arriving from it carry its old generation and are refused.
With no stream attached the session is detached: resumable until the grace
timer fires.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from prometheus_client import Counter

from antiphon.common.ids import new_id
from antiphon.v1 import session_pb2 as spb

Outbound = asyncio.Queue[spb.ServerEvent | None]


class Attachment:
    def __init__(
        self,
        session_id: str,
        generation: int,
        *,
        max_events: int = 4096,
        overflows: Counter | None = None,
    ) -> None:
        self._session_id = session_id
        self.generation = generation
        self._max_events = max_events
        self._overflows = overflows
        self.outbound: Outbound | None = None
        # No stream attached: the client may resume within the grace period.
        self.detached = False
        self._grace_timer: asyncio.TimerHandle | None = None

    def attach(self, seq: int) -> tuple[Outbound, int, bool]:
        """A new outbound queue for the stream that now owns the client side,
        and whether it replaced a stream still attached."""
        self._cancel_timer()
        replaced = self.outbound is not None
        if self.outbound is not None:
            self.outbound.put_nowait(self.replaced_event(seq))
            self.outbound.put_nowait(None)
        self.generation += 1
        self.outbound = asyncio.Queue()
        self.detached = False
        return self.outbound, self.generation, replaced

    def send(self, event: spb.ServerEvent) -> None:
        if self.outbound is None:
            return
        if self.outbound.qsize() >= self._max_events:
            # Its gateway takes nothing: end the stream after what it holds,
            # so the session detaches; the journal keeps this event and the
            # rest, and a resume replays them. Memory stays bounded.
            if self._overflows is not None:
                self._overflows.inc()
            self.end()
            return
        self.outbound.put_nowait(event)

    def end(self) -> None:
        """End the attached stream (its gateway waits for that), if one is open."""
        if self.outbound is not None:
            self.outbound.put_nowait(None)
            self.outbound = None

    def detach(self, generation: int, grace_s: float, on_expiry: Callable[[int], None]) -> bool:
        """No stream is attached any more: start the grace timer. False when
        `generation` was replaced already, or the session is detached already."""
        if generation != self.generation or self.detached:
            return False
        self.detached = True
        self.end()
        loop = asyncio.get_running_loop()
        self._grace_timer = loop.call_later(grace_s, on_expiry, generation)
        return True

    def expired(self, generation: int) -> bool:
        """The grace timer of `generation` fired and nobody came back since."""
        return generation == self.generation and self.detached

    def replaced_event(self, seq: int) -> spb.ServerEvent:
        replaced = spb.SessionReplaced(
            session_id=self._session_id, attachment_generation=self.generation
        )
        return spb.ServerEvent(seq=seq, event_id=new_id("event"), session_replaced=replaced)

    def resync(self, seq: int, reason: str) -> None:
        """The session cannot go on: tell the stream to start over, and end it."""
        self._cancel_timer()
        if self.outbound is not None:
            resync = spb.ResyncRequired(session_id=self._session_id, reason=reason)
            self.outbound.put_nowait(
                spb.ServerEvent(seq=seq, event_id=new_id("event"), resync_required=resync)
            )
        self.end()

    def stop(self, seq: int, *, notify: bool) -> None:
        """The session stops here; `notify`: tell the stream it was replaced."""
        self._cancel_timer()
        if self.outbound is not None and notify:
            self.outbound.put_nowait(self.replaced_event(seq))
        self.end()

    def _cancel_timer(self) -> None:
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None
