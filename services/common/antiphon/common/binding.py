"""The worker side of a stage `Bind` stream, shared by every stage.

A bound session takes requests one by one (`handle`) and reports results
through the `emit` callback it was built with; this module pumps requests
in, streams results out in order (outbox.py: those waiting may be merged,
by a hook the stage gives), and always closes the session, whether the
session service ended the stream or died. A worker at capacity, or
draining, refuses a new binding with RESOURCE_EXHAUSTED before anything is
built for it; an admitted one is answered with initial metadata at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Protocol, TypeVar

import grpc
from opentelemetry import trace
from prometheus_client import Counter, Gauge

from antiphon.common import tracing
from antiphon.common.outbox import Merge, Outbox

Req = TypeVar("Req", contravariant=True)
Ev = TypeVar("Ev")

# Initial metadata of an admitted binding.
BOUND_METADATA = "antiphon-bound"
# Results one binding may have waiting for the session service to read
# them (merged ones count once). A reader this far behind ends the stream (the session rebinds and
# starts over from its history) rather than the worker queueing without end.
MAX_PENDING_RESULTS = 4096


class BoundSession(Protocol[Req]):
    def handle(self, request: Req) -> None: ...

    async def close(self) -> None: ...


class ActiveSessions:
    """How many sessions a worker serves now (mirrored into a gauge), whether
    it takes another (not beyond its capacity, not while draining), and how
    many it let go for not reading their results (`overflows`)."""

    def __init__(self, gauge: Gauge, *, capacity: int, overflows: Counter | None = None) -> None:
        self.count = 0
        self.capacity = capacity
        self.draining = False
        self._gauge = gauge
        self.overflows = overflows
        self._watchers: list[Callable[[], None]] = []

    def watch(self, on_change: Callable[[], None]) -> None:
        """Call `on_change` whenever the count or the draining flag changes."""
        self._watchers.append(on_change)

    def refusal(self) -> str | None:
        """Why a new session may not bind here now; None when it may."""
        if self.draining:
            return "worker is draining"
        if self.count >= self.capacity:
            return f"worker is at capacity ({self.count}/{self.capacity} sessions)"
        return None

    async def drain(self) -> None:
        """SIGTERM: take no new session; the bound ones finish or move (the
        gRPC server's stop grace ends them)."""
        self.draining = True
        self._changed()

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        self.count += 1
        self._changed()
        try:
            yield
        finally:
            self.count -= 1
            self._changed()

    def _changed(self) -> None:
        self._gauge.set(self.count)
        for on_change in self._watchers:
            on_change()


async def serve_binding(
    requests: AsyncIterator[Req],
    make_session: Callable[[Callable[[Ev], None]], BoundSession[Req]],
    *,
    context: grpc.aio.ServicerContext,
    active: ActiveSessions,
    span_name: str,
    merge: Merge[Ev] | None = None,
) -> AsyncIterator[Ev]:
    """The results of the session `make_session` builds, as they come; with `merge`,
    those still unsent when another comes may be folded together (outbox.py)."""
    parent = tracing.extract_metadata(context.invocation_metadata())
    # Checked and counted with no await in between: two binds racing for the
    # last slot cannot both get it.
    if (reason := active.refusal()) is not None:
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, reason)
    with active.track():
        # Tells the binder at once that it was admitted (a refusal is the
        # other answer): the session may have nothing to receive for a while.
        await context.send_initial_metadata(((BOUND_METADATA, "1"),))
        out: Outbox[Ev] = Outbox(MAX_PENDING_RESULTS, merge)
        session = make_session(out.put)

        async def consume() -> None:
            try:
                async for req in requests:
                    session.handle(req)
            finally:
                out.close()

        reader = asyncio.create_task(consume())
        try:
            with trace.get_tracer("antiphon.stage").start_as_current_span(
                span_name, context=parent
            ):
                while (event := await out.get()) is not None:
                    yield event
            if out.overflowed:
                # The session service stopped reading (its mailbox full: a
                # stalled Redis, a stuck actor): said, counted, and the
                # session rebinds and starts over from its history.
                if active.overflows is not None:
                    active.overflows.inc()
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"the session read none of its last {MAX_PENDING_RESULTS} results",
                )
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reader
            await session.close()
