"""The stage0 gRPC servicer: one `Bind` stream per session binding."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import grpc

from antiphon.common.binding import ActiveSessions, serve_binding
from antiphon.common.moshi_checkpoint import FRAME_MS, SAMPLE_RATE
from antiphon.stage0.cascade import CascadeSession
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.models import SessionEngines, Stage0Engines
from antiphon.stage0.responder import merge_deltas
from antiphon.stage0.settings import Stage0Settings
from antiphon.stage0.turn import TurnBatcher
from antiphon.stage0.vad import VadBatcher
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc


def duplex_capabilities() -> cpb.Capabilities:
    """A model-native duplex backend (the Moshi architecture): it hears 24 kHz
    audio continuously and decides itself when to speak, one 80 ms frame per
    step. The user talking over it is the model's own business (no barge-in),
    and a commit only records the user item."""
    return cpb.Capabilities(
        implementation_level="model_native_duplex",
        model_native=True,
        supports_input_append=True,
        supports_barge_in=False,
        chunk_period_ms=FRAME_MS,
        input_sample_rate_hz=SAMPLE_RATE,
        input_modes=["append_audio_chunk"],
    )


class Stage0Service(stage_pb2_grpc.Stage0ServiceServicer):
    def __init__(
        self, *, settings: Stage0Settings, metrics: Stage0Metrics, active: ActiveSessions
    ) -> None:
        # Set once the engines have loaded; until then Bind answers UNAVAILABLE.
        self.models: Stage0Engines | None = None
        self._settings = settings
        self._metrics = metrics
        self._active = active
        # One per worker, made with the engines: every session's VAD frames
        # (and semantic_vad windows) share its batches.
        self._vad_batcher: VadBatcher | None = None
        self._turn_batcher: TurnBatcher | None = None

    def capabilities(self) -> cpb.Capabilities:
        if self._settings.backend == "moshi":
            return duplex_capabilities()
        return cpb.Capabilities(
            implementation_level="cascade",
            supports_input_append=True,
            # Its VAD hears speech over a reply, and a cancel stops the reply's work.
            supports_barge_in=self._settings.supports_barge_in,
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
        if isinstance(models, SessionEngines):
            async for event in serve_binding(
                request_iterator,
                models.bind,
                context=context,
                active=self._active,
                span_name="stage0.bind",
            ):
                yield event
            return
        if self._vad_batcher is None:
            self._vad_batcher = VadBatcher(
                models.vad,
                offload_at=self._settings.vad_offload_at,
                observe_batch=self._metrics.vad_batch_size.observe,
            )
        if self._turn_batcher is None:
            self._turn_batcher = TurnBatcher(
                models.turn,
                max_batch=self._settings.turn_max_batch,
                observe_batch=self._metrics.turn_batch_size.observe,
            )
        batcher, turns = self._vad_batcher, self._turn_batcher

        def session(emit: Callable[[pb.Stage0Event], None]) -> CascadeSession:
            return CascadeSession(models, self._settings, emit, self._metrics, batcher, turns)

        async for event in serve_binding(
            request_iterator,
            session,
            context=context,
            active=self._active,
            span_name="stage0.bind",
            merge=merge_deltas if self._settings.coalesce_deltas else None,
        ):
            yield event
