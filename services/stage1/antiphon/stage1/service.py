"""The stage1 gRPC servicer: one `Bind` stream per session binding."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor

import grpc

from antiphon.common.binding import ActiveSessions, serve_binding
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.scheduler import SynthesisScheduler
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
        # One voice thread per worker, shared by its sessions, first clauses first.
        self._scheduler = SynthesisScheduler(executor, metrics.queue_depth)
        self._settings = settings
        self._metrics = metrics
        self._active = active

    async def Describe(
        self, request: pb.DescribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.StageInfo:
        return pb.StageInfo(
            backend=self._settings.backend,
            # Every chunk carries word marks, so playback positions map to words.
            capabilities=cpb.Capabilities(supports_audio_truncate=True),
            capacity=self._settings.capacity,
            active_sessions=self._active.count,
        )

    async def Bind(
        self,
        request_iterator: AsyncIterator[pb.Stage1Request],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.Stage1Event]:
        def session(emit: Callable[[pb.Stage1Event], None]) -> SynthesisSession:
            return SynthesisSession(
                self._tts,
                self._scheduler,
                self._metrics,
                emit,
                first_clause_words=self._settings.first_clause_words,
            )

        async for event in serve_binding(
            request_iterator,
            session,
            context=context,
            active=self._active,
            span_name="stage1.bind",
        ):
            yield event
