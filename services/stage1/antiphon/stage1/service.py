"""The stage1 gRPC servicer: one `Bind` stream per session binding.

What a binding's session is depends on the backend (backends/ builds the
factory): text synthesis for Piper and the synthetic voice, a decoder row
for `mimi`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc

from antiphon.common.binding import ActiveSessions, BoundSession, serve_binding
from antiphon.stage1.settings import Stage1Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc

Emit = Callable[[pb.Stage1Event], None]
SessionFactory = Callable[[Emit], BoundSession[pb.Stage1Request]]


class Stage1Service(stage_pb2_grpc.Stage1ServiceServicer):
    def __init__(
        self,
        *,
        sessions: SessionFactory,
        capabilities: cpb.Capabilities,
        settings: Stage1Settings,
        active: ActiveSessions,
    ) -> None:
        self._sessions = sessions
        self._capabilities = capabilities
        self._settings = settings
        self._active = active

    async def Describe(
        self, request: pb.DescribeRequest, context: grpc.aio.ServicerContext
    ) -> pb.StageInfo:
        return pb.StageInfo(
            backend=self._settings.backend,
            capabilities=self._capabilities,
            capacity=self._settings.capacity,
            active_sessions=self._active.count,
        )

    async def Bind(
        self,
        request_iterator: AsyncIterator[pb.Stage1Request],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.Stage1Event]:
        async for event in serve_binding(
            request_iterator,
            self._sessions,
            context=context,
            active=self._active,
            span_name="stage1.bind",
        ):
            yield event
