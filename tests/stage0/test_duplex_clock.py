"""The lockstep clock: a step per period while a session is bound, none while
none is; a step that ends past its deadline is late (its frames say so and
are counted) and the clock catches up rather than skipping; close stops it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
import torch
from prometheus_client import CollectorRegistry

from antiphon.stage0.backends.moshi.clock import LockstepClock
from antiphon.stage0.backends.moshi.lockstep import Batch
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb
from tests.stage0.duplex_reference import tiny_lockstep
from tests.support.polling import eventually

pytestmark = pytest.mark.models


async def until(check: Callable[[], bool]) -> None:
    async def holds() -> bool:
        return check()

    await eventually(holds, timeout_s=20)


async def wait_for_frames(frames: list[pb.ModelFrame], n: int) -> None:
    await until(lambda: len(frames) >= n)


async def test_slow_steps_are_late_counted_and_caught_up_not_skipped() -> None:
    registry = CollectorRegistry()
    lockstep = tiny_lockstep(2, torch.float32, metrics=Stage0Metrics(registry))
    compute = lockstep.compute

    def slow(batch: Batch) -> list[list[int]]:
        time.sleep(0.02)
        return compute(batch)

    lockstep.compute = slow  # type: ignore[method-assign]
    clock = LockstepClock(lockstep, period_s=0.005)
    clock.start()
    frames: list[pb.ModelFrame] = []
    lockstep.open(lambda e: frames.append(e.frame))
    clock.wake()
    await wait_for_frames(frames, 5)
    await clock.close()
    # Every step made its frame (after the first max_delay): none was skipped...
    assert [f.index for f in frames] == list(range(len(frames)))
    assert len(frames) == clock.steps - lockstep.model.lm_gen.max_delay
    # ...and each ran past its deadline.
    assert clock.late_steps == clock.steps and all(f.late for f in frames)
    late = registry.get_sample_value("antiphon_stage0_duplex_late_frames_total")
    assert late == len(frames)
    silent = registry.get_sample_value("antiphon_stage0_duplex_silence_frames_total")
    # Every step heard silence (no audio came); close may cut one short after its gather.
    assert silent in (clock.steps, clock.steps + 1)


async def test_on_time_steps_are_not_late() -> None:
    lockstep = tiny_lockstep(1, torch.float32)
    # A generous period: a tiny step takes milliseconds even on a busy box.
    clock = LockstepClock(lockstep, period_s=0.25)
    clock.start()
    frames: list[pb.ModelFrame] = []
    lockstep.open(lambda e: frames.append(e.frame))
    clock.wake()
    await wait_for_frames(frames, 1)
    await clock.close()
    assert clock.late_steps == 0 and not any(f.late for f in frames)


async def test_no_steps_without_sessions_and_none_after_close() -> None:
    lockstep = tiny_lockstep(1, torch.float32)
    clock = LockstepClock(lockstep, period_s=0.002)
    clock.start()
    await asyncio.sleep(0.05)
    assert clock.steps == 0
    row = lockstep.open(lambda e: None)
    clock.wake()
    await until(lambda: clock.steps >= 3)
    lockstep.release(row)
    await asyncio.sleep(0.05)
    idle = clock.steps
    await asyncio.sleep(0.05)
    assert clock.steps == idle
    lockstep.open(lambda e: None)
    clock.wake()
    await clock.close()
    stopped = clock.steps
    await asyncio.sleep(0.05)
    assert clock.steps == stopped


async def test_a_failing_step_reports_an_error_to_every_session_and_stops_the_worker() -> None:
    lockstep = tiny_lockstep(2, torch.float32)

    def broken(batch: Batch) -> list[list[int]]:
        raise RuntimeError("device lost")

    lockstep.compute = broken  # type: ignore[method-assign]
    stopping = asyncio.Event()
    clock = LockstepClock(lockstep, period_s=0.002, on_failure=stopping.set)
    clock.start()
    events: list[pb.Stage0Event] = []
    lockstep.open(events.append)
    clock.wake()
    await until(lambda: bool(events))
    await clock.close()
    assert events[0].error.code == "engine_failed"
    assert "device lost" in events[0].error.message
    # The worker is told to stop: its sessions move to another.
    assert stopping.is_set()
