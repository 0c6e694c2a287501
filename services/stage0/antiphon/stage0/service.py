"""The stage0 gRPC servicer: one `Bind` stream per session binding."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
from opentelemetry import trace

from antiphon.common import tracing
from antiphon.stage0.cascade import CascadeSession
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.models import Engines
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc

tracer = trace.get_tracer("antiphon.stage0")


class Stage0Service(stage_pb2_grpc.Stage0ServiceServicer):
    def __init__(self, *, settings: Stage0Settings, metrics: Stage0Metrics) -> None:
        # Set once the engines have loaded; until then Bind answers UNAVAILABLE.
        self.models: Engines | None = None
        self._settings = settings
        self._metrics = metrics
        self._active = 0

    def capabilities(self) -> cpb.Capabilities:
        return cpb.Capabilities(
            implementation_level="cascade",
            supports_input_append=True,
            chunk_period_ms=self._settings.chunk_period_ms,
            input_modes=["append_audio_chunk"],
        )

    async def Describe(
        self, request: pb.DescribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.StageInfo:
        return pb.StageInfo(
            backend=self._settings.backend,
            capabilities=self.capabilities(),
            capacity=self._settings.capacity,
            active_sessions=self._active,
        )

    async def Bind(
        self,
        request_iterator: AsyncIterator[pb.Stage0Request],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.Stage0Event]:
        if self.models is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "models are still loading")
            return
        parent = tracing.extract_metadata(context.invocation_metadata())
        out: asyncio.Queue[pb.Stage0Event | None] = asyncio.Queue()
        session = CascadeSession(self.models, self._settings, out.put_nowait, self._metrics)

        async def consume() -> None:
            try:
                async for req in request_iterator:
                    session.handle(req)
            finally:
                out.put_nowait(None)

        self._active += 1
        self._metrics.sessions_active.set(self._active)
        reader = asyncio.create_task(consume())
        try:
            with tracer.start_as_current_span("stage0.bind", context=parent):
                while (event := await out.get()) is not None:
                    yield event
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reader
            await session.close()
            self._active -= 1
            self._metrics.sessions_active.set(self._active)
