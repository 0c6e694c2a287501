"""The cascade's engines as the worker serves them: each bound session a
`CascadeSession`, every session's VAD frames (and semantic_vad windows) in
the worker's shared batches. The `synthetic` backend serves its own engines
the same way."""

from __future__ import annotations

from collections.abc import Callable

from antiphon.common.outbox import Merge
from antiphon.stage0.backends.cascade.listening.turn import TurnBatcher
from antiphon.stage0.backends.cascade.listening.vad import VadBatcher
from antiphon.stage0.backends.cascade.models import Engines
from antiphon.stage0.backends.cascade.responder import merge_deltas
from antiphon.stage0.backends.cascade.session import CascadeSession
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import stage_pb2 as pb


class CascadeWorker:
    def __init__(self, engines: Engines, settings: Stage0Settings, metrics: Stage0Metrics) -> None:
        self.engines = engines
        self._settings = settings
        self._metrics = metrics
        # One per worker, made at the first bind: every session's VAD frames
        # (and semantic_vad windows) share its batches.
        self._vad_batcher: VadBatcher | None = None
        self._turn_batcher: TurnBatcher | None = None

    @property
    def merge(self) -> Merge[pb.Stage0Event] | None:
        # A stream that lags gets a response's text deltas merged (responder.py).
        return merge_deltas if self._settings.coalesce_deltas else None

    def bind(self, emit: Callable[[pb.Stage0Event], None]) -> CascadeSession:
        if self._vad_batcher is None:
            self._vad_batcher = VadBatcher(
                self.engines.vad,
                offload_at=self._settings.vad_offload_at,
                observe_batch=self._metrics.vad_batch_size.observe,
            )
        if self._turn_batcher is None:
            self._turn_batcher = TurnBatcher(
                self.engines.turn,
                max_batch=self._settings.turn_max_batch,
                observe_batch=self._metrics.turn_batch_size.observe,
            )
        return CascadeSession(
            self.engines, self._settings, emit, self._metrics, self._vad_batcher, self._turn_batcher
        )

    async def close(self) -> None:
        await self.engines.close()
