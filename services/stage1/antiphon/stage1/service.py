"""The stage1 gRPC servicer: one `Bind` stream per session binding."""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import Executor

import grpc

from antiphon.common.binding import ActiveSessions, serve_binding
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.settings import Stage1Settings
from antiphon.stage1.synthesis import SynthesisSession, Voice
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc


class Stage1Service(stage_pb2_grpc.Stage1ServiceServicer):
    def __init__(
        self,
        *,
        tts: Voice,
        executor: Executor,
        settings: Stage1Settings,
        metrics: Stage1Metrics,
        active: ActiveSessions,
    ) -> None:
        self._tts = tts
        self._executor = executor
        self._settings = settings
        self._metrics = metrics
        self._active = active

    async def Describe(
        self, request: pb.DescribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.StageInfo:
        return pb.StageInfo(
            backend=self._settings.backend,
            capabilities=cpb.Capabilities(),
            capacity=self._settings.capacity,
            active_sessions=self._active.count,
        )

    async def Bind(
        self,
        request_iterator: AsyncIterator[pb.Stage1Request],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.Stage1Event]:
        event: pb.Stage1Event
        async for event in serve_binding(
            request_iterator,
            lambda emit: SynthesisSession(self._tts, self._executor, self._metrics, emit),
            context=context,
            active=self._active,
            span_name="stage1.bind",
        ):
            yield event
