"""The worker side of a stage `Bind` stream, shared by every stage.

A bound session takes requests one by one (`handle`) and reports results
through the `emit` callback it was built with; this module pumps requests
in, streams results out in order, and always closes the session, whether
the session service ended the stream or died.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Protocol, TypeVar

import grpc
from opentelemetry import trace
from prometheus_client import Gauge

from antiphon.common import tracing

Req = TypeVar("Req", contravariant=True)
Ev = TypeVar("Ev")


class BoundSession(Protocol[Req]):
    def handle(self, request: Req) -> None: ...

    async def close(self) -> None: ...


class ActiveSessions:
    """How many sessions a worker serves now, mirrored into a gauge."""

    def __init__(self, gauge: Gauge) -> None:
        self.count = 0
        self._gauge = gauge

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        self.count += 1
        self._gauge.set(self.count)
        try:
            yield
        finally:
            self.count -= 1
            self._gauge.set(self.count)


async def serve_binding(
    requests: AsyncIterator[Req],
    make_session: Callable[[Callable[[Ev], None]], BoundSession[Req]],
    *,
    context: grpc.aio.ServicerContext,
    active: ActiveSessions,
    span_name: str,
) -> AsyncIterator[Ev]:
    parent = tracing.extract_metadata(context.invocation_metadata())
    out: asyncio.Queue[Ev | None] = asyncio.Queue()
    session = make_session(out.put_nowait)

    async def consume() -> None:
        try:
            async for req in requests:
                session.handle(req)
        finally:
            out.put_nowait(None)

    with active.track():
        reader = asyncio.create_task(consume())
        try:
            with trace.get_tracer("antiphon.stage").start_as_current_span(
                span_name, context=parent
            ):
                while (event := await out.get()) is not None:
                    yield event
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reader
            await session.close()
