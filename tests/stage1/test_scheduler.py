"""The synthesis scheduler: first clauses first, `parallel` jobs at a time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry, Gauge

from antiphon.stage1.speech.scheduler import SynthesisScheduler, voicing_first

Make = Callable[[int], SynthesisScheduler]


@pytest.fixture
async def make() -> AsyncIterator[Make]:
    made: list[tuple[SynthesisScheduler, ThreadPoolExecutor]] = []

    def build(parallel: int) -> SynthesisScheduler:
        executor = ThreadPoolExecutor(parallel)
        depth = Gauge("depth", "queued", registry=CollectorRegistry())
        scheduler = SynthesisScheduler(executor, depth, parallel)
        made.append((scheduler, executor))
        return scheduler

    yield build
    for scheduler, executor in made:
        await scheduler.close()
        executor.shutdown(wait=False, cancel_futures=True)


class Gate:
    """Jobs that record their start and wait, on their thread, to be let go."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self._open = threading.Event()
        self._lock = threading.Lock()

    def job(self, name: str) -> Callable[[], str]:
        def run() -> str:
            with self._lock:
                self.started.append(name)
            assert self._open.wait(timeout=5)
            return name

        return run

    def open(self) -> None:
        self._open.set()


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_one_at_a_time_a_first_clause_goes_ahead_of_later_ones(make: Make) -> None:
    scheduler, gate = make(1), Gate()
    running = asyncio.ensure_future(scheduler.run(gate.job("a"), first=False, wanted=lambda: True))
    await _until(lambda: gate.started == ["a"])
    later = asyncio.ensure_future(scheduler.run(gate.job("b"), first=False, wanted=lambda: True))
    first = asyncio.ensure_future(scheduler.run(gate.job("c"), first=True, wanted=lambda: True))
    await asyncio.sleep(0.05)
    assert gate.started == ["a"]  # the one slot is taken
    gate.open()
    assert await asyncio.gather(running, later, first) == ["a", "b", "c"]
    assert gate.started == ["a", "c", "b"]


async def test_a_job_knows_on_its_thread_whether_it_voices_a_first_clause(make: Make) -> None:
    """A batched voice reads it to put first clauses ahead within a batch."""
    scheduler = make(2)
    first = scheduler.run(voicing_first, first=True, wanted=lambda: True)
    later = scheduler.run(voicing_first, first=False, wanted=lambda: True)
    assert await asyncio.gather(first, later) == [True, False]
    assert voicing_first() is False  # nothing leaks to the caller's thread


async def test_parallel_jobs_run_at_once_and_no_more(make: Make) -> None:
    scheduler, gate = make(3), Gate()
    jobs = [
        asyncio.ensure_future(scheduler.run(gate.job(n), first=False, wanted=lambda: True))
        for n in "abcd"
    ]
    await _until(lambda: len(gate.started) == 3)
    await asyncio.sleep(0.05)
    assert gate.started == ["a", "b", "c"]  # the fourth waits for a slot
    gate.open()
    assert await asyncio.gather(*jobs) == ["a", "b", "c", "d"]


async def test_work_no_longer_wanted_by_its_turn_is_skipped(make: Make) -> None:
    scheduler, gate = make(1), Gate()
    wanted = {"b": True}
    running = asyncio.ensure_future(scheduler.run(gate.job("a"), first=False, wanted=lambda: True))
    await _until(lambda: gate.started == ["a"])
    skipped = asyncio.ensure_future(
        scheduler.run(gate.job("b"), first=False, wanted=lambda: wanted["b"])
    )
    wanted["b"] = False
    gate.open()
    assert await asyncio.gather(running, skipped) == ["a", None]
    assert gate.started == ["a"]
