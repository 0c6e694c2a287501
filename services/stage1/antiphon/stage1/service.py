"""The stage1 gRPC servicer: one `Bind` stream per session binding."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import Executor

import grpc
from opentelemetry import trace

from antiphon.common import tracing
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.settings import Stage1Settings
from antiphon.stage1.synthesis import SynthesisSession, Voice
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc

tracer = trace.get_tracer("antiphon.stage1")


class Stage1Service(stage_pb2_grpc.Stage1ServiceServicer):
    def __init__(
        self, *, tts: Voice, executor: Executor, settings: Stage1Settings, metrics: Stage1Metrics
    ) -> None:
        self._tts = tts
        self._executor = executor
        self._settings = settings
        self._metrics = metrics
        self._active = 0

    async def Describe(
        self, request: pb.DescribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.StageInfo:
        return pb.StageInfo(
            backend=self._settings.backend,
            capabilities=cpb.Capabilities(),
            capacity=self._settings.capacity,
            active_sessions=self._active,
        )

    async def Bind(
        self,
        request_iterator: AsyncIterator[pb.Stage1Request],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.Stage1Event]:
        parent = tracing.extract_metadata(context.invocation_metadata())
        out: asyncio.Queue[pb.Stage1Event | None] = asyncio.Queue()
        session = SynthesisSession(self._tts, self._executor, self._metrics, out.put_nowait)

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
            with tracer.start_as_current_span("stage1.bind", context=parent):
                while (event := await out.get()) is not None:
                    yield event
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reader
            await session.close()
            self._active -= 1
            self._metrics.sessions_active.set(self._active)
