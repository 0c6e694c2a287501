"""The lockstep's clock: a step every 80 ms on a deadline schedule, while any
session is bound.

Tick k is due at t0 + k * period and must end by the next tick. One that ends
later is late (its frames say so and are counted); the clock does not skip
the steps it fell behind by but runs them at once, so every session still
gets every frame, later. The model runs in one worker thread of its own
(torch releases the GIL), so the event loop keeps taking audio and sending
frames meanwhile; steps never overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from antiphon.common.moshi_checkpoint import FRAME_MS

log = logging.getLogger(__name__)


BatchT = TypeVar("BatchT")


class Stepped(Protocol[BatchT]):
    """What the clock steps: a Lockstep, a stepper's view of one that also
    hands each step's output to its front ends (stepper.py), or another duplex
    model's batch (`nemotron`'s Listening)."""

    @property
    def active(self) -> int: ...

    def gather(self) -> BatchT: ...

    def compute(self, batch: BatchT) -> list[list[int]]: ...

    def deliver(self, batch: BatchT, tokens: list[list[int]], *, late: bool) -> None: ...

    def fail(self, message: str) -> None: ...


class LockstepClock:
    def __init__(
        self,
        lockstep: Stepped[Any],
        *,
        period_s: float = FRAME_MS / 1000,
        thread_setup: Callable[[], None] | None = None,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self._lockstep = lockstep
        self._period_s = period_s
        self._wake = asyncio.Event()
        # `thread_setup` runs in the step thread: torch's thread count is its own.
        self._executor = ThreadPoolExecutor(
            1, thread_name_prefix="duplex-step", initializer=thread_setup
        )
        self._on_failure = on_failure
        self._task: asyncio.Task[None] | None = None
        self.steps = 0
        self.late_steps = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="duplex-clock")

    def wake(self) -> None:
        """A session was bound: tick (again) if the clock sleeps."""
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        # A step still running in the thread ends first: its model state is the worker's.
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        lockstep = self._lockstep
        due = loop.time() + self._period_s
        try:
            while True:
                if not lockstep.active:
                    # Nobody to serve: no step until a session binds, whose
                    # first frame of audio comes a period later.
                    self._wake.clear()
                    await self._wake.wait()
                    due = loop.time() + self._period_s
                await asyncio.sleep(max(0.0, due - loop.time()))
                batch = lockstep.gather()
                tokens = await loop.run_in_executor(self._executor, lockstep.compute, batch)
                due += self._period_s
                late = loop.time() > due
                lockstep.deliver(batch, tokens, late=late)
                self.steps += 1
                self.late_steps += late
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("duplex step failed; the clock stops")
            lockstep.fail(f"duplex model step failed: {exc}")
            self._on_failure()
