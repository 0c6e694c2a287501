"""Who speaks next on a stage1 worker's voice.

A worker synthesises `parallel` clauses at a time: one where the voice uses
the one thread it is given, many where the voice batches them (a GPU's, which
voices a batch in about the time of one sentence). With plain first-come
order, a session's first clause could wait behind another session's long
sentence; here a response's first clause goes ahead of every later clause, so
time to first audio stays flat as sessions share a worker. Work whose epoch
was cancelled while it waited is skipped, never synthesised.

A batched voice (voice_batch.py) runs many jobs at once, so the order that
matters is the one in which their sentences join a batch: each job runs
with `voicing_first()` saying whether it is a first clause, and the voice
puts those ahead too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from prometheus_client import Gauge

T = TypeVar("T")

FIRST_CLAUSE = 0
LATER_CLAUSE = 1

# Set on the voice thread while a job runs; each thread has its own.
_FIRST: ContextVar[bool] = ContextVar("voicing_first", default=False)


def voicing_first() -> bool:
    """Whether the job running on this thread voices a response's first clause."""
    return _FIRST.get()


@contextlib.contextmanager
def voicing(*, first: bool) -> Iterator[None]:
    """Within it, `voicing_first()` on this thread says `first`."""
    token = _FIRST.set(first)
    try:
        yield
    finally:
        _FIRST.reset(token)


@dataclass(order=True)
class _Job(Generic[T]):
    priority: int
    order: int
    run: Callable[[], T] = field(compare=False)
    wanted: Callable[[], bool] = field(compare=False)
    result: asyncio.Future[T | None] = field(compare=False)


def _voiced(job: _Job[T]) -> T:
    with voicing(first=job.priority == FIRST_CLAUSE):
        return job.run()


class SynthesisScheduler:
    """Runs synthesis jobs on `executor`, `parallel` at a time, first clauses first."""

    def __init__(self, executor: Executor, queue_depth: Gauge, parallel: int = 1) -> None:
        self._executor = executor
        self._queue_depth = queue_depth
        self._slots = asyncio.Semaphore(parallel)
        self._running: set[asyncio.Task[None]] = set()
        self._heap: list[_Job[Any]] = []
        self._order = itertools.count()
        self._wakeup = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None

    async def run(
        self, fn: Callable[[], T], *, first: bool, wanted: Callable[[], bool]
    ) -> T | None:
        """`fn()` on the voice thread, or None if `wanted()` is false by its turn."""
        loop = asyncio.get_running_loop()
        job: _Job[T] = _Job(
            FIRST_CLAUSE if first else LATER_CLAUSE,
            next(self._order),
            fn,
            wanted,
            loop.create_future(),
        )
        heapq.heappush(self._heap, job)
        self._queue_depth.set(len(self._heap))
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.create_task(self._dispatch())
        self._wakeup.set()
        return await job.result

    async def _dispatch(self) -> None:
        while True:
            while not self._heap:
                self._wakeup.clear()
                await self._wakeup.wait()
            # A free slot first: the job to run is chosen when it can start,
            # so a first clause that comes meanwhile still goes ahead.
            await self._slots.acquire()
            if not self._heap:
                self._slots.release()
                continue
            job = heapq.heappop(self._heap)
            self._queue_depth.set(len(self._heap))
            task = asyncio.create_task(self._execute(job))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _execute(self, job: _Job[Any]) -> None:
        try:
            if job.result.done():
                return  # its session closed while it waited
            if not job.wanted():
                job.result.set_result(None)
                return
            try:
                value = await asyncio.get_running_loop().run_in_executor(
                    self._executor, functools.partial(_voiced, job)
                )
            except Exception as exc:
                if not job.result.done():
                    job.result.set_exception(exc)
                return
            if not job.result.done():
                job.result.set_result(value)
        finally:
            self._slots.release()

    async def close(self) -> None:
        tasks = [t for t in (self._dispatcher, *self._running) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
