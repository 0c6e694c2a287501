"""A frame backend's model, stepped over a batch of rows, one row a session
(`mimi`: backends/mimi/lockstep.py; `nemotron`: backends/nemotron/lockstep.py).

Stage0 steps all its sessions in lockstep and sends each one's frame within
a few milliseconds of the others, every 80 ms. One batched step of every
row that has a frame costs about what one row's does, so the step loop
waits for the first frame, gathers the others for a short window (or until
every held row has one), and steps them together. Rows without a frame
sit the step out: the model keeps their state as it was, so their next
frame continues exactly where they were. A row is reset on its own when a
session takes it, at the start of the next step (never while a step runs).

The model runs on one thread of its own, one step at a time, so the event
loop keeps taking requests meanwhile; rows are read and results delivered
on the loop. `step()` does all of it in the caller's thread, for tests.

What a backend writes is `_run`, one step of its model over a `Batch`
(on the model's thread), and `_close_model`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from antiphon.stage1.frames.session import Pcm
from antiphon.stage1.metrics import DuplexMetrics

log = logging.getLogger(__name__)


class DecodeRow(Protocol):
    """What holds a row: a session's frames, oldest first."""

    def queued(self) -> int:
        """Frames waiting to be decoded."""
        ...

    def head_codes(self) -> Sequence[int] | None:
        """The oldest waiting frame's values (frames/session.FrameForm.reads),
        left queued."""
        ...

    def decoded(self, pcm: Pcm) -> bool | None:
        """The oldest frame is decoded (`pcm`: its samples at the model's
        rate, in [-1, 1]); True when its audio was sent, False when it was
        silent, None when that is known elsewhere (a front end's session: it
        counts)."""
        ...


@dataclass
class Batch:
    # The row holders whose frames this step decodes (None: no frame).
    rows: list[DecodeRow | None]
    values: npt.NDArray[np.int64]  # [slots, frame_width]
    # Rows a session took since the last step: their state starts afresh.
    reset: npt.NDArray[np.bool_]  # [slots]
    # Rows some session holds (the others may drop what they keep).
    held: npt.NDArray[np.bool_]  # [slots]

    @property
    def stepping(self) -> npt.NDArray[np.bool_]:
        """Rows with a frame in this step."""
        return np.array([row is not None for row in self.rows], dtype=np.bool_)


class Lockstep(ABC):
    def __init__(
        self,
        slots: int,
        *,
        frame_width: int,
        cardinality: int,
        name: str,
        metrics: DuplexMetrics | None = None,
        gather_s: float = 0.005,
        poll_s: float | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError(f"a decoder batch needs at least one row, got {slots}")
        self.slots = slots
        self.frame_width = frame_width
        self.cardinality = cardinality
        self._name = name
        self._metrics = metrics
        self._gather_s = gather_s
        # Rows filled from another process (a stepper's) wake the loop once
        # per step, not per frame: the gather looks at them this often.
        self._poll_s = poll_s
        # Called on the loop after each step's frames are delivered.
        self.on_step: Callable[[], None] = lambda: None
        self._holders: list[DecodeRow | None] = [None] * slots
        self._to_reset = [False] * slots
        # Torch work stays on this one thread: one step at a time, off the loop.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # --- the model (on its thread) -----------------------------------------

    @abstractmethod
    def _run(self, batch: Batch) -> Pcm:
        """One step of the model over `batch`: [slots, samples] of audio, the
        rows without a frame left as they were (their samples are ignored)."""

    @abstractmethod
    def _close_model(self) -> None:
        """Release what the model holds, after its last step."""

    # --- rows (on the event loop) ---------------------------------------

    def acquire(self, row: DecodeRow) -> int | None:
        """A free row for `row`'s frames, reset before its first decode; None
        when every row is held (admission should have refused the session)."""
        for slot, holder in enumerate(self._holders):
            if holder is None:
                self.hold(slot, row)
                return slot
        return None

    def hold(self, slot: int, row: DecodeRow) -> None:
        """`row` takes `slot` (a stepper's front end chose it), reset before its first decode."""
        self._holders[slot] = row
        self._to_reset[slot] = True
        self._rows_changed()

    def release(self, slot: int, row: DecodeRow) -> None:
        if self._holders[slot] is row:
            self._holders[slot] = None
            self._rows_changed()

    @property
    def rows_active(self) -> int:
        return sum(holder is not None for holder in self._holders)

    def dropped(self) -> None:
        """A session's frame not decoded: its queue was full (a stalled decoder)."""
        if self._metrics is not None:
            self._metrics.frames.labels(sent="dropped").inc()

    def notify(self) -> None:
        """A row has a new frame: wake the step loop."""
        self._wake.set()

    def framed(self, slot: int, codes: Sequence[int]) -> None:
        """Row `slot` has a new frame (session.Decoder): its holder gives the
        values when the step asks, so only the loop is woken."""
        self.notify()

    def _rows_changed(self) -> None:
        if self._metrics is not None:
            self._metrics.rows_active.set(self.rows_active)
        # One row fewer may be all the gather window was waiting for.
        self._wake.set()

    # --- one step ---------------------------------------------------------

    def step(self) -> int:
        """Decode one frame of every row that has one, here and now; how many."""
        batch = self._collect()
        if batch is None:
            return 0
        return self._deliver(batch, self._decode(batch))

    def _collect(self) -> Batch | None:
        rows: list[DecodeRow | None] = [None] * self.slots
        values = np.zeros((self.slots, self.frame_width), dtype=np.int64)
        for slot, holder in enumerate(self._holders):
            head = holder.head_codes() if holder is not None else None
            if head is not None:
                rows[slot] = holder
                values[slot] = head
        if all(row is None for row in rows):
            return None
        reset = np.array(self._to_reset, dtype=np.bool_)
        self._to_reset = [False] * self.slots
        held = np.array([holder is not None for holder in self._holders], dtype=np.bool_)
        return Batch(rows, values, reset, held)

    def _decode(self, batch: Batch) -> Pcm:
        """On the model's thread."""
        started = time.perf_counter()
        pcm = self._run(batch)
        if self._metrics is not None:
            self._metrics.step_seconds.observe(time.perf_counter() - started)
        return pcm

    def _deliver(self, batch: Batch, pcm: Pcm) -> int:
        decoded = 0
        for slot, row in enumerate(batch.rows):
            # A session that left during the step (its row maybe taken again
            # since) gets nothing; its frame's audio is nobody's now.
            if row is None or self._holders[slot] is not row:
                continue
            sent = row.decoded(pcm[slot])
            decoded += 1
            if self._metrics is not None and sent is not None:
                self._metrics.frames.labels(sent="audio" if sent else "silent").inc()
        return decoded

    # --- the step loop ----------------------------------------------------

    def start(self, on_failure: Callable[[], None]) -> None:
        """Run the step loop; `on_failure` is called if it dies (the worker
        cannot serve its sessions any more and should stop)."""

        def done(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                log.error("the %s step loop died", self._name, exc_info=task.exception())
                on_failure()

        self._task = asyncio.create_task(self._loop(), name=f"{self._name}-lockstep")
        self._task.add_done_callback(done)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._any_ready():
                self._wake.clear()
                await self._wake.wait()
                continue
            await self._gather(loop)
            batch = self._collect()
            if batch is None:
                continue
            pcm = await loop.run_in_executor(self._executor, self._decode, batch)
            self._deliver(batch, pcm)
            self.on_step()

    async def _gather(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wait up to the gather window for every held row to have a frame;
        not at all while some row is behind (it has more than one waiting)."""
        if self._gather_s <= 0 or any(row.queued() > 1 for row in self._held()):
            return
        deadline = loop.time() + self._gather_s
        while not all(row.queued() for row in self._held()):
            left = deadline - loop.time()
            if left <= 0:
                return
            self._wake.clear()
            wait = left if self._poll_s is None else min(left, self._poll_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    def _any_ready(self) -> bool:
        return any(row.queued() for row in self._held())

    def _held(self) -> Iterator[DecodeRow]:
        return (holder for holder in self._holders if holder is not None)

    async def close(self) -> None:
        """Stop the step loop, then release the model after any step still
        running on its thread (the same thread, so in order)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_model)
        self._executor.shutdown(wait=False)
