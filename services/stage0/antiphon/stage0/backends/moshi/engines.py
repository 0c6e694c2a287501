"""The `moshi` backend as a worker loads it: the model, its lockstep batch of
`capacity` rows and their clock, and the sessions bound to them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from antiphon.common.outbox import Merge
from antiphon.stage0.backends.moshi.clock import LockstepClock, Stepped
from antiphon.stage0.backends.moshi.lockstep import Lockstep
from antiphon.stage0.backends.moshi.model import DuplexModel
from antiphon.stage0.backends.moshi.rows import AudioBuffer
from antiphon.stage0.backends.moshi.session import DuplexSession
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import stage_pb2 as pb


def torch_threads(threads: int) -> Callable[[], None]:
    def setup() -> None:
        import torch

        torch.set_num_threads(threads)

    return setup


def started_clock(
    stepped: Stepped[Any], settings: Stage0Settings, on_failure: Callable[[], None]
) -> LockstepClock:
    """The clock over a duplex batch, ticking while a session is bound, its
    step thread on `duplex_threads` of torch's."""
    clock = LockstepClock(
        stepped, thread_setup=torch_threads(settings.duplex_threads), on_failure=on_failure
    )
    clock.start()
    return clock


async def load_lockstep(
    settings: Stage0Settings,
    metrics: Stage0Metrics,
    audio: Callable[[int], AudioBuffer] | None = None,
) -> Lockstep:
    """The model and its batch of `capacity` rows, loaded off the event loop
    (health checks answer meanwhile); `audio`: row i's audio buffer (None:
    one of each row's own)."""
    model = await asyncio.to_thread(DuplexModel.load, settings)
    return await asyncio.to_thread(
        Lockstep,
        model,
        settings.capacity,
        metrics=metrics,
        jitter_ms=settings.duplex_jitter_ms,
        quiet_frames=settings.duplex_quiet_frames,
        compile=settings.duplex_compile,
        context_tokens=settings.duplex_context_text_max_tokens,
        audio=audio,
    )


class DuplexEngines:
    # Each frame's events go as they are: none fold together.
    merge: Merge[pb.Stage0Event] | None = None

    def __init__(self, lockstep: Lockstep, clock: LockstepClock) -> None:
        self.lockstep = lockstep
        self.clock = clock

    @classmethod
    async def load(
        cls,
        settings: Stage0Settings,
        metrics: Stage0Metrics,
        *,
        on_failure: Callable[[], None] = lambda: None,
    ) -> DuplexEngines:
        """Loaded (load_lockstep); the clock starts at once and ticks while a
        session is bound. `on_failure`: the model failed a step and the clock
        stopped."""
        lockstep = await load_lockstep(settings, metrics)
        return cls(lockstep, started_clock(lockstep, settings, on_failure))

    def bind(self, emit: Callable[[pb.Stage0Event], None]) -> DuplexSession:
        return DuplexSession(self.lockstep, emit, on_open=self.clock.wake)

    async def close(self) -> None:
        await self.clock.close()
