"""The stage0 gRPC servicer: one `Bind` stream per session binding."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from antiphon.common.binding import ActiveSessions, serve_binding
from antiphon.stage0 import backends
from antiphon.stage0.backend import Stage0Backend, Stage0Engines
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc


class Stage0Service(stage_pb2_grpc.Stage0ServiceServicer):
    def __init__(
        self,
        *,
        settings: Stage0Settings,
        metrics: Stage0Metrics,
        active: ActiveSessions,
        backend: Stage0Backend | None = None,
    ) -> None:
        # Set once the engines have loaded; until then Bind answers UNAVAILABLE.
        self.models: Stage0Engines | None = None
        self._settings = settings
        self._metrics = metrics
        self._active = active
        # What it declares; None: the one the settings name (backends/__init__.py).
        self.backend = backend or backends.get(settings.backend)

    def capabilities(self) -> cpb.Capabilities:
        return self.backend.capabilities(self._settings)

    async def Describe(
        self, request: pb.DescribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.StageInfo:
        return pb.StageInfo(
            backend=self._settings.backend,
            capabilities=self.capabilities(),
            capacity=self._settings.capacity,
            active_sessions=self._active.count,
        )

    async def Bind(
        self,
        request_iterator: AsyncIterator[pb.Stage0Request],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.Stage0Event]:
        if self.models is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "models are still loading")
            return
        models = self.models
        async for event in serve_binding(
            request_iterator,
            models.bind,
            context=context,
            active=self._active,
            span_name="stage0.bind",
            merge=models.merge,
        ):
            yield event
