"""The `moshi` backend's batch: `slots` rows, one per bound session, stepped
together one 80 ms frame at a time.

A step is three calls, so that the model runs off the event loop while rows
open, close and take audio on it: `gather` (on the loop) takes a frame from
every row's jitter buffer, `compute` (in the clock's worker thread) resets
the rows opened since the last step and runs Mimi's encoder and the LM on the
whole batch, `deliver` (on the loop) reports each row's frame to its session.
`step` runs the three at once, for tests that drive it frame by frame.

Every row steps, bound or not: a free row steps on silence, costing what a
bound one does, so that no row's state ever waits on another's. A row opened
mid-call is reset alone (moshi's streaming modules take a reset mask), and
with `support_out_of_sync` each row keeps its own offset: for its first
`max_delay` steps the LM has nothing for it yet, and it gets no frame.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from antiphon.common.moshi_checkpoint import FRAME_SAMPLES
from antiphon.stage0.duplex_model import DuplexModel
from antiphon.stage0.duplex_rows import Row
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)

UNGENERATED = -2  # LMModel.ungenerated_token_id: a row still in its first max_delay steps


class NoFreeRowError(RuntimeError):
    """Every row serves a session (admission should have refused this one)."""


@dataclass
class Batch:
    """One step's input, gathered on the event loop."""

    # The session each row served when gathered (None: free); its frame goes
    # to that session only, even if the row changed hands meanwhile.
    rows: list[Row | None]
    pcm: npt.NDArray[np.int16]
    # Rows to start afresh before this step (opened since the last one).
    reset: list[bool]


class Lockstep:
    def __init__(
        self,
        model: DuplexModel,
        slots: int,
        *,
        metrics: Stage0Metrics,
        jitter_ms: int,
        quiet_frames: int,
        compile: bool = False,
    ) -> None:
        self.model = model
        self.slots = slots
        self._metrics = metrics
        self._jitter_ms = jitter_ms
        self._quiet_frames = quiet_frames
        self._compile = compile
        self._rows: list[Row | None] = [None] * slots
        self._fresh: set[int] = set()
        # The device and dtype Mimi's input must have.
        first = next(iter(model.mimi.parameters()))
        self._device, self._dtype = first.device, first.dtype
        with self._no_compile():
            model.mimi.streaming_forever(slots)
            model.lm_gen.streaming_forever(slots)

    # ----------------------------------------------------------- rows
    def open(self, emit: Callable[[pb.Stage0Event], None], session_id: str = "") -> Row:
        """A free row for a new session, reset at its first step."""
        for index, occupant in enumerate(self._rows):
            if occupant is None:
                row = Row(
                    index,
                    emit,
                    jitter_ms=self._jitter_ms,
                    quiet_frames=self._quiet_frames,
                    session_id=session_id,
                )
                self._rows[index] = row
                self._fresh.add(index)
                self._metrics.duplex_rows_active.set(self.active)
                return row
        raise NoFreeRowError(f"all {self.slots} rows serve sessions")

    def release(self, row: Row) -> None:
        """The session left: its row steps on silence until another takes it."""
        if self._rows[row.index] is row:
            self._rows[row.index] = None
            self._metrics.duplex_rows_active.set(self.active)

    def hear(self, row: Row, pcm16: bytes) -> None:
        """Audio for `row`'s next steps; what overflows its buffer is counted."""
        dropped_ms = row.audio.push(pcm16)
        if dropped_ms:
            self._metrics.duplex_dropped_input_ms.inc(dropped_ms)

    @property
    def active(self) -> int:
        return sum(row is not None for row in self._rows)

    # ----------------------------------------------------------- a step
    def gather(self) -> Batch:
        pcm = np.zeros((self.slots, FRAME_SAMPLES), dtype=np.int16)
        silent = 0
        for index, row in enumerate(self._rows):
            if row is None:
                continue
            frame = row.audio.take_frame()
            if frame is None:
                silent += 1
            else:
                pcm[index] = np.frombuffer(frame, dtype="<i2")
        if silent:
            self._metrics.duplex_silence_frames.inc(silent)
        reset = [index in self._fresh for index in range(self.slots)]
        self._fresh.clear()
        return Batch(list(self._rows), pcm, reset)

    def compute(self, batch: Batch) -> list[list[int]]:
        """Mimi's encoder and one LM step for every row: per row, the text token
        then the audio tokens (all UNGENERATED while the row is too new)."""
        t0 = time.perf_counter()
        model = self.model
        with torch.no_grad(), self._no_compile():
            if any(batch.reset):
                mask = torch.tensor(batch.reset, dtype=torch.bool, device=self._device)
                model.mimi.reset_streaming(mask)
                model.lm_gen.reset_streaming(mask)
            audio = torch.from_numpy(batch.pcm).to(self._device, self._dtype) / 32768.0
            codes = model.mimi.encode(audio[:, None, :])
            out = model.lm_gen.step(codes)
            assert out is not None  # support_out_of_sync: always a tensor
            tokens: list[list[int]] = out[:, : model.dep_q + 1, 0].tolist()
        self._metrics.duplex_step.observe(time.perf_counter() - t0)
        return tokens

    def deliver(self, batch: Batch, tokens: list[list[int]], *, late: bool) -> None:
        emitted = 0
        for index, row in enumerate(batch.rows):
            if row is None or self._rows[index] is not row:
                continue  # free, or its session left while the step ran
            text_token, *codes = tokens[index]
            if text_token == UNGENERATED:
                continue
            text = self.model.text_of(text_token)
            word = text_token not in self.model.silent_ids and bool(text)
            row.frame(text, codes, word=word, late=late)
            emitted += 1
        if late and emitted:
            self._metrics.duplex_late_frames.inc(emitted)

    def step(self, *, late: bool = False) -> None:
        """One whole step, here and now (no clock)."""
        batch = self.gather()
        self.deliver(batch, self.compute(batch), late=late)

    def fail(self, message: str) -> None:
        """The model failed: every bound session hears so."""
        for row in self._rows:
            if row is not None:
                row.emit(
                    pb.Stage0Event(
                        error=pb.StageError(epoch=row.epoch, code="engine_failed", message=message)
                    )
                )

    @contextlib.contextmanager
    def _no_compile(self) -> Iterator[None]:
        if self._compile:
            yield
            return
        from moshi.utils.compile import no_compile

        with no_compile():
            yield
