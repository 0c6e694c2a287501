"""The `nemotron` backend's batch: `slots` rows, one per bound session, heard
and answered together one 80 ms frame at a time.

As `moshi`'s lockstep (whose rows, clock and sessions it shares), a step is
`gather` (on the event loop: a frame of 16 kHz audio from every row),
`compute` (in the clock's thread: rows opened since the last step start
afresh and take in their prompt, then perception (hearing.py) and one LLM
step (thinking.py) for the whole batch) and `deliver` (on the loop: each
row's text token as a frame).
Every row steps, bound or not, so that no row's state waits on another's.
A frame carries its token id (`ModelFrame.tokens`): stage1's EAR-TTS speaks
from the LLM's tokens.

With a function head, each row's function channel is read for tool calls
(calls.py), sent between its frames; what goes into the channel (a tool's
result, context text) waits in the row's queue and goes in a token a step.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from antiphon.stage0.backends.moshi.context import ContextQueue
from antiphon.stage0.backends.moshi.lockstep import NoFreeRowError
from antiphon.stage0.backends.moshi.rows import Row
from antiphon.stage0.backends.moshi.session import Prefill
from antiphon.stage0.backends.nemotron.backend import FRAME_MS, SAMPLE_RATE
from antiphon.stage0.backends.nemotron.hearing import Hearing
from antiphon.stage0.backends.nemotron.model import NemotronModel
from antiphon.stage0.backends.nemotron.thinking import Thinking
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb

FRAME_SAMPLES = SAMPLE_RATE * FRAME_MS // 1000  # 1,280
# Tokens a row may have waiting for its function channel: 80 ms each, so
# about 80 s of results and context.
MAX_FORCED_TOKENS = 1000


@dataclass
class Batch:
    """One step's input, gathered on the event loop."""

    # The session each row served when gathered (None: free).
    rows: list[Row | None]
    pcm: npt.NDArray[np.int16]
    # Rows to start afresh before this step (opened since the last one),
    # and the prompt each then takes in (empty: none).
    reset: list[bool]
    prompts: list[list[int]]
    # Per row: the token forced into its function channel (-1: none), and
    # the context it was the last of (told once the step is done).
    forced: list[int]
    taken: list[pb.ContextTaken | None]


class Listening:
    def __init__(
        self,
        model: NemotronModel,
        slots: int,
        *,
        metrics: Stage0Metrics,
        jitter_ms: int,
        quiet_frames: int,
        window: int,
    ) -> None:
        self.model = model
        self.slots = slots
        self._metrics = metrics
        self._jitter_ms = jitter_ms
        self._quiet_frames = quiet_frames
        self._rows: list[Row | None] = [None] * slots
        self._fresh: set[int] = set()
        # Per row: the prompt it takes in when it starts afresh, what waits
        # to go into its function channel, and its channel's reader.
        self._prompts: list[list[int]] = [[] for _ in range(slots)]
        self._forced: list[deque[tuple[int, pb.ContextTaken | None]]] = [
            deque() for _ in range(slots)
        ]
        self._readers = [model.call_reader() for _ in range(slots)] if model.calls_tools else []
        self._hearing = Hearing(model.stt, slots)
        self._thinking = Thinking(model.stt, slots, window=window)
        first = next(model.stt.parameters())
        self._device, self._dtype = first.device, first.dtype

    # ----------------------------------------------------------- rows
    def open(
        self,
        emit: Callable[[pb.Stage0Event], None],
        session_id: str = "",
        prefill: Prefill = (),
        *,
        index: int | None = None,
    ) -> Row:
        free = range(self.slots) if index is None else (index,)
        for i in free:
            if self._rows[i] is None:
                row = Row(
                    i,
                    emit,
                    jitter_ms=self._jitter_ms,
                    quiet_frames=self._quiet_frames,
                    context=_no_context,
                    session_id=session_id,
                    rate=SAMPLE_RATE,
                )
                self._rows[i] = row
                self._start(i, prefill)
                self._metrics.duplex_rows_active.set(self.active)
                return row
        raise NoFreeRowError(f"all {self.slots} rows serve sessions")

    def restart(self, row: Row, prefill: Prefill = ()) -> None:
        """The session's instructions changed: its row starts afresh with them."""
        if self._rows[row.index] is row:
            row.restart()
            self._start(row.index, prefill)

    def _start(self, index: int, prefill: Prefill) -> None:
        self._fresh.add(index)
        self._prompts[index] = [int(token) for token in prefill]
        self._forced[index] = deque()
        if self._readers:
            self._readers[index] = self.model.call_reader()

    def force(self, row: Row, tokens: list[int], taken: pb.ContextTaken | None = None) -> bool:
        """`tokens` into `row`'s function channel after what waits, a token a
        step; `taken` told once the last is in. False: more than a row holds."""
        queue = self._forced[row.index]
        if len(queue) + len(tokens) > MAX_FORCED_TOKENS:
            return False
        if not tokens:
            if taken is not None:
                row.emit(pb.Stage0Event(context_taken=taken))
            return True
        queue.extend((token, None) for token in tokens[:-1])
        queue.append((tokens[-1], taken))
        return True

    def release(self, row: Row) -> None:
        if self._rows[row.index] is row:
            self._rows[row.index] = None
            self._metrics.duplex_rows_active.set(self.active)

    def hear(self, row: Row, pcm16: bytes) -> None:
        dropped_ms = row.audio.push(pcm16)
        if dropped_ms:
            self._metrics.duplex_dropped_input_ms.inc(dropped_ms)

    def next_frame(self, row: Row) -> int:
        return row.frames

    @property
    def active(self) -> int:
        return sum(row is not None for row in self._rows)

    # ----------------------------------------------------------- a step
    def gather(self) -> Batch:
        pcm = np.zeros((self.slots, FRAME_SAMPLES), dtype=np.int16)
        reset = [i in self._fresh for i in range(self.slots)]
        prompts = [self._prompts[i] if reset[i] else [] for i in range(self.slots)]
        forced = [-1] * self.slots
        taken: list[pb.ContextTaken | None] = [None] * self.slots
        self._fresh.clear()
        silent = 0
        for i, row in enumerate(self._rows):
            if row is None:
                continue
            if self._forced[i]:
                forced[i], last_of = self._forced[i].popleft()
                if last_of is not None:
                    # Taken with the step that makes the row's next frame.
                    last_of.index = row.frames
                taken[i] = last_of
            frame = row.audio.take_frame()
            if frame is None:
                silent += 1
            else:
                pcm[i] = np.frombuffer(frame, dtype="<i2")
        if silent:
            self._metrics.duplex_silence_frames.inc(silent)
        return Batch(list(self._rows), pcm, reset, prompts, forced, taken)

    def compute(self, batch: Batch) -> list[list[int]]:
        """Perception and one LLM step for every row: each row's text token."""
        t0 = time.perf_counter()
        with torch.no_grad():
            if any(batch.reset):
                mask = torch.tensor(batch.reset, dtype=torch.bool, device=self._device)
                self._hearing.reset(mask)
                self._thinking.reset(mask)
            for i, prompt in enumerate(batch.prompts):
                if prompt:
                    self._thinking.prefill(i, prompt)
            audio = torch.from_numpy(batch.pcm).to(self._device, torch.float32) / 32768.0
            heard = self._hearing.step(audio).to(self._dtype)
            forced = torch.tensor(batch.forced, dtype=torch.long, device=self._device)
            tokens = self._thinking.step(heard, forced)
            called = self._thinking.called.tolist()
        self._metrics.duplex_step.observe(time.perf_counter() - t0)
        return [[token, function] for token, function in zip(tokens.tolist(), called, strict=True)]

    def deliver(self, batch: Batch, tokens: list[list[int]], *, late: bool) -> None:
        emitted = 0
        for i, row in enumerate(batch.rows):
            if row is None or self._rows[i] is not row:
                continue  # free, or its session left while the step ran
            token, function = tokens[i]
            text = self.model.text_of(token)
            row.frame(text, [], word=bool(text), late=late, tokens=(token,))
            emitted += 1
            if self._readers:
                for said in self._readers[i].push(function):
                    call = pb.GenerationToolCall(
                        epoch=row.epoch, call=said.call, refused=said.refused
                    )
                    row.emit(pb.Stage0Event(tool_call=call))
            if batch.taken[i] is not None:
                row.emit(pb.Stage0Event(context_taken=batch.taken[i]))
        if late and emitted:
            self._metrics.duplex_late_frames.inc(emitted)

    def step(self, *, late: bool = False) -> None:
        """One whole step, here and now (no clock)."""
        batch = self.gather()
        self.deliver(batch, self.compute(batch), late=late)

    def fail(self, message: str) -> None:
        for row in self._rows:
            if row is not None:
                row.emit(
                    pb.Stage0Event(
                        error=pb.StageError(epoch=row.epoch, code="engine_failed", message=message)
                    )
                )


def _no_context() -> ContextQueue:
    # The backend declares no context text: its rows' queues stay empty.
    return ContextQueue(1, pad=-1, end_pad=-1)
