"""The `nemotron` backend as a worker loads it: the model, its batch of
`capacity` rows and their clock (moshi's), and the sessions bound to them
(session.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from antiphon.common.outbox import Merge
from antiphon.stage0.backends.moshi.clock import LockstepClock
from antiphon.stage0.backends.moshi.engines import started_clock
from antiphon.stage0.backends.nemotron.listening import Listening
from antiphon.stage0.backends.nemotron.model import NemotronModel
from antiphon.stage0.backends.nemotron.session import NemotronSession
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import stage_pb2 as pb

# Frames the LLM's attention keeps per row when `duplex_context` is unset:
# 4 minutes, Moshi's own span.
DEFAULT_WINDOW = 3000


class NemotronEngines:
    merge: Merge[pb.Stage0Event] | None = None

    def __init__(self, listening: Listening, clock: LockstepClock) -> None:
        self.listening = listening
        self.clock = clock

    @classmethod
    async def load(
        cls,
        settings: Stage0Settings,
        metrics: Stage0Metrics,
        *,
        on_failure: Callable[[], None] = lambda: None,
    ) -> NemotronEngines:
        model = await asyncio.to_thread(NemotronModel.load, settings)
        listening = await asyncio.to_thread(
            Listening,
            model,
            settings.capacity,
            metrics=metrics,
            jitter_ms=settings.duplex_jitter_ms,
            quiet_frames=settings.duplex_quiet_frames,
            window=settings.duplex_context or DEFAULT_WINDOW,
        )
        return cls(listening, started_clock(listening, settings, on_failure))

    def bind(self, emit: Callable[[pb.Stage0Event], None]) -> NemotronSession:
        return NemotronSession(self.listening, emit, on_open=self.clock.wake)

    async def close(self) -> None:
        await self.clock.close()
