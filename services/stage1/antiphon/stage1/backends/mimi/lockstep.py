"""The `mimi` backend's decoder: one Mimi in streaming mode, a batch row per session.

Stage0 steps all its sessions in lockstep and sends each one's frame within
a few milliseconds of the others, every 80 ms. One batched decode of every
row that has a frame costs about what one row's does, so the step loop
waits for the first frame, gathers the others for a short window (or until
every held row has one), and decodes them together. Rows without a frame
sit the step out: Mimi's exec mask is False for them, so their streaming
state does not move and their next frame continues exactly where they
were. A row is reset on its own when a session takes it, at the start of
the next step (never while a step runs).

Decoding runs on one thread of its own, one step at a time, so the event
loop keeps taking requests meanwhile; rows are read and results delivered
on the loop. `step()` does all of it in the caller's thread, for tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from antiphon.common import moshi_checkpoint
from antiphon.stage1.metrics import DuplexMetrics
from antiphon.stage1.settings import Stage1Settings

if TYPE_CHECKING:
    import torch
    from moshi.models.compression import MimiModel

log = logging.getLogger(__name__)

Pcm = npt.NDArray[np.floating[Any]]


class DecodeRow(Protocol):
    """What holds a row: a session's frames, oldest first."""

    def queued(self) -> int:
        """Frames waiting to be decoded."""
        ...

    def head_codes(self) -> Sequence[int] | None:
        """The oldest waiting frame's codes (one per codebook), left queued."""
        ...

    def decoded(self, pcm: Pcm) -> bool | None:
        """The oldest frame is decoded (`pcm`: its samples at 24 kHz, in
        [-1, 1]); True when its audio was sent, False when it was silent,
        None when that is known elsewhere (a front end's session: it counts)."""
        ...


@dataclass
class _Batch:
    # The row holders whose frames this step decodes (None: no frame).
    rows: list[DecodeRow | None]
    codes: npt.NDArray[np.int64]  # [slots, codebooks, 1]
    reset: npt.NDArray[np.bool_]  # [slots]


class MimiLockstep:
    def __init__(
        self,
        mimi: MimiModel,
        slots: int,
        *,
        metrics: DuplexMetrics | None = None,
        gather_s: float = 0.005,
        poll_s: float | None = None,
        compile: bool = False,
    ) -> None:
        if slots < 1:
            raise ValueError(f"a decoder batch needs at least one row, got {slots}")
        self.slots = slots
        self.num_codebooks: int = mimi.num_codebooks
        self.cardinality: int = mimi.cardinality
        self._mimi = mimi
        self._device: torch.device = next(iter(mimi.parameters())).device
        self._metrics = metrics
        self._gather_s = gather_s
        # Rows filled from another process (a stepper's) wake the loop once
        # per step, not per frame: the gather looks at them this often.
        self._poll_s = poll_s
        # Called on the loop after each step's frames are delivered.
        self.on_step: Callable[[], None] = lambda: None
        self._compile = compile
        self._holders: list[DecodeRow | None] = [None] * slots
        self._to_reset = [False] * slots
        # Entered once for the worker's life: every row's state lives in it.
        self._streaming = mimi.streaming(slots)
        # Torch work stays on this one thread: one step at a time, off the loop.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="mimi")
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

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
        codes when the step asks, so only the loop is woken."""
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

    def _collect(self) -> _Batch | None:
        rows: list[DecodeRow | None] = [None] * self.slots
        codes = np.zeros((self.slots, self.num_codebooks, 1), dtype=np.int64)
        for slot, holder in enumerate(self._holders):
            head = holder.head_codes() if holder is not None else None
            if head is not None:
                rows[slot] = holder
                codes[slot, :, 0] = head
        if all(row is None for row in rows):
            return None
        reset = np.array(self._to_reset, dtype=np.bool_)
        self._to_reset = [False] * self.slots
        return _Batch(rows, codes, reset)

    def _decode(self, batch: _Batch) -> Pcm:
        """On the decoder thread (grad mode is per thread, so it is set here)."""
        import torch

        started = time.perf_counter()
        mask = torch.tensor([row is not None for row in batch.rows], device=self._device)
        with torch.no_grad(), moshi_checkpoint.compile_mode(self._compile):
            if batch.reset.any():
                self._mimi.reset_streaming(torch.from_numpy(batch.reset).to(self._device))
            self._mimi.set_exec_mask(mask)
            out = self._mimi.decode(torch.from_numpy(batch.codes).to(self._device))
            pcm: Pcm = out[:, 0].cpu().numpy()
        if self._metrics is not None:
            self._metrics.step_seconds.observe(time.perf_counter() - started)
        return pcm

    def _deliver(self, batch: _Batch, pcm: Pcm) -> int:
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
                log.error("the mimi step loop died", exc_info=task.exception())
                on_failure()

        self._task = asyncio.create_task(self._run(), name="mimi-lockstep")
        self._task.add_done_callback(done)

    async def _run(self) -> None:
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
        """Stop the step loop, then leave streaming mode after any step still
        running on the decoder thread (the same thread, so in order)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._streaming.close)
        self._executor.shutdown(wait=False)


def load(
    settings: Stage1Settings, metrics: DuplexMetrics, *, poll_s: float | None = None
) -> MimiLockstep:
    """The decoder `settings` name, with a row per session the worker admits."""
    if not settings.duplex_checkpoint:
        raise SystemExit(
            "stage1 backend mimi needs duplex_checkpoint (ANTIPHON_DUPLEX_CHECKPOINT): "
            "the local Moshi or PersonaPlex checkpoint folder stage0 serves, or random:7b"
        )
    if not settings.duplex_compile:
        moshi_checkpoint.disable_compile_by_default()
    import torch

    torch.set_num_threads(settings.duplex_threads)
    checkpoint = moshi_checkpoint.resolve(settings.duplex_checkpoint)
    mimi = checkpoint.mimi(moshi_checkpoint.device(settings.duplex_device))
    log.info(
        "mimi decoder loaded",
        extra={"checkpoint": checkpoint.name, "device": str(next(mimi.parameters()).device)},
    )
    return MimiLockstep(
        mimi,
        settings.capacity,
        metrics=metrics,
        gather_s=settings.duplex_gather_ms / 1000,
        poll_s=poll_s,
        compile=settings.duplex_compile,
    )
