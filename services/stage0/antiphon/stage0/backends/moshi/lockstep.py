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

A row opened with a prompt (PersonaPlex's voice and instructions,
prompt.py) first steps through it, one forced frame a step in
lockstep with the others: its user codes replace Mimi's encoding of the
row's input, and LMGen's text and audio hooks overwrite what the LM
generated for that row alone before it is written to the LM's cache. Its
output over those steps is the prompt's and is not reported; what the
session says meanwhile is dropped (counted) as it comes, and the model hears
it from the first step after.

Text a session puts into its row's context (context.py) goes through the
same text hook, a token a step, once the row's prompt is done; unlike a
prompt frame, the row still hears its input and its frames are reported.
The frame whose text a row's step makes is `Row.made` at that step (frame j
holds the text of its j-th step after the prompt: LMGen gives the text and
codebook 0 of a step `max_delay` steps later), so a context's `ContextTaken`
names the frame that carries its last token, sent `max_delay` frames later.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from antiphon.common import moshi_checkpoint
from antiphon.common.moshi_checkpoint import FRAME_MS, FRAME_SAMPLES
from antiphon.stage0.backends.moshi.context import DEFAULT_LIMIT, ContextQueue, Offer
from antiphon.stage0.backends.moshi.model import DuplexModel
from antiphon.stage0.backends.moshi.prompt import ForcedFrame
from antiphon.stage0.backends.moshi.rows import AudioBuffer, Row
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
    # Per row: the prompt frame it steps through (None: its input is heard).
    forced: list[ForcedFrame | None]
    # Per row: its output this step is the prompt's, not reported.
    discard: list[bool]
    # Per row: the context token offered to its text stream, the queue it
    # came from, and the frame whose text this step makes.
    offers: list[Offer | None]
    queues: list[ContextQueue | None]
    made: list[int]
    # Per row: its text token this step, after forcing (set by `compute` when
    # a row had an offer: whether the model took it).
    said: list[int] | None = None


@dataclass
class _Forcing:
    """One step's forced values, on the device, for the LMGen hooks."""

    mask: torch.Tensor  # [B] bool: prompt rows (user, text and agent forced)
    user: torch.Tensor  # [B, K]
    text: torch.Tensor  # [B]
    agent: torch.Tensor  # [B, dep_q]
    # [B] bool: text forced whatever the model sampled (prompt rows included)
    firm: torch.Tensor
    # [B] bool: text forced only where the model sampled no padding
    offered: torch.Tensor
    pads: torch.Tensor  # the padding ids
    prompt: bool  # some row steps through a prompt frame
    context: bool  # some row was offered a context token


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
        context_tokens: int = DEFAULT_LIMIT,
        audio: Callable[[int], AudioBuffer] | None = None,
    ) -> None:
        self.model = model
        self.slots = slots
        self._metrics = metrics
        self._jitter_ms = jitter_ms
        self._quiet_frames = quiet_frames
        self._compile = compile
        self._context_tokens = context_tokens
        # Row i's audio buffer; None: a jitter buffer of its own per session.
        # A stepper's front ends write theirs into shared memory (stepper.py).
        self._audio = audio
        self._rows: list[Row | None] = [None] * slots
        self._fresh: set[int] = set()
        # Set for the LM step of a batch with forced text (the hooks read it),
        # and that step's text tokens after forcing.
        self._forcing: _Forcing | None = None
        self._said: torch.Tensor | None = None
        model.lm_gen.on_text_hook = self._force_text
        model.lm_gen.on_audio_hook = self._force_audio
        # The device and dtype Mimi's input must have.
        first = next(iter(model.mimi.parameters()))
        self._device, self._dtype = first.device, first.dtype
        with moshi_checkpoint.compile_mode(self._compile):
            model.mimi.streaming_forever(slots)
            model.lm_gen.streaming_forever(slots)

    # ----------------------------------------------------------- rows
    def open(
        self,
        emit: Callable[[pb.Stage0Event], None],
        session_id: str = "",
        prefill: Sequence[ForcedFrame] = (),
        *,
        index: int | None = None,
    ) -> Row:
        """A free row for a new session (row `index`, where the caller owns
        which: a stepper's front ends each own some), reset at its first
        step, which steps through `prefill` before it hears the session."""
        free = range(self.slots) if index is None else (index,)
        for index in free:
            if self._rows[index] is None:
                row = Row(
                    index,
                    emit,
                    jitter_ms=self._jitter_ms,
                    quiet_frames=self._quiet_frames,
                    context=self._context_queue,
                    session_id=session_id,
                    audio=self._audio(index) if self._audio else None,
                )
                self._rows[index] = row
                self._prompt(row, prefill)
                self._metrics.duplex_rows_active.set(self.active)
                return row
        if len(free) == 1:
            raise NoFreeRowError(f"row {free[0]} serves a session")
        raise NoFreeRowError(f"all {self.slots} rows serve sessions")

    def restart(self, row: Row, prefill: Sequence[ForcedFrame] = ()) -> None:
        """The session's persona or voice changed: its row starts afresh (a
        new model context) with the new prompt, at its next step."""
        if self._rows[row.index] is row:
            row.restart()
            self._prompt(row, prefill)

    def _prompt(self, row: Row, prefill: Sequence[ForcedFrame]) -> None:
        """Reset `row` at its next step, then step it through `prefill`."""
        self._fresh.add(row.index)
        row.prefill = deque(prefill)
        # The prompt's frames come out up to max_delay steps late.
        row.discard = len(prefill) + self.model.lm_gen.max_delay if prefill else 0

    def _context_queue(self) -> ContextQueue:
        lm = self.model.lm_gen.lm_model
        return ContextQueue(
            self._context_tokens, pad=lm.text_padding_token_id, end_pad=lm.end_of_text_padding_id
        )

    def next_frame(self, row: Row) -> int:
        """The frame whose text `row`'s next step (after its prompt) makes."""
        return row.frames if row.index in self._fresh else row.made

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
        forced: list[ForcedFrame | None] = [None] * self.slots
        discard = [False] * self.slots
        offers: list[Offer | None] = [None] * self.slots
        queues: list[ContextQueue | None] = [None] * self.slots
        made = [0] * self.slots
        reset = [index in self._fresh for index in range(self.slots)]
        self._fresh.clear()
        silent = dropped_ms = 0
        for index, row in enumerate(self._rows):
            if row is None:
                continue
            if reset[index]:
                # A new context: the old one's frames still owed are never made.
                row.made = row.frames
            if row.discard:
                row.discard -= 1
                discard[index] = True
            if row.prefill:
                # Mimi encodes silence, which the LM won't hear. The model does
                # not listen yet: what the session says meanwhile is taken as
                # it comes and dropped (counted), so that once the prompt ends
                # the model hears the session in real time, not seconds behind.
                forced[index] = row.prefill.popleft()
                if row.audio.take_frame() is not None:
                    dropped_ms += FRAME_MS
                continue
            made[index] = row.made
            row.made += 1
            offers[index], queues[index] = row.context.offer(), row.context
            frame = row.audio.take_frame()
            if frame is None:
                silent += 1
            else:
                pcm[index] = np.frombuffer(frame, dtype="<i2")
        if silent:
            self._metrics.duplex_silence_frames.inc(silent)
        if dropped_ms:
            self._metrics.duplex_dropped_input_ms.inc(dropped_ms)
        return Batch(list(self._rows), pcm, reset, forced, discard, offers, queues, made)

    def compute(self, batch: Batch) -> list[list[int]]:
        """Mimi's encoder and one LM step for every row: per row, the text token
        then the audio tokens (all UNGENERATED while the row is too new)."""
        t0 = time.perf_counter()
        model = self.model
        with torch.no_grad(), moshi_checkpoint.compile_mode(self._compile):
            if any(batch.reset):
                mask = torch.tensor(batch.reset, dtype=torch.bool, device=self._device)
                model.mimi.reset_streaming(mask)
                model.lm_gen.reset_streaming(mask)
            audio = torch.from_numpy(batch.pcm).to(self._device, self._dtype) / 32768.0
            codes = model.mimi.encode(audio[:, None, :])
            self._forcing = self._forcing_of(batch.forced, batch.offers)
            try:
                if self._forcing is not None and self._forcing.prompt:
                    f = self._forcing
                    codes = torch.where(f.mask[:, None, None], f.user[:, :, None], codes)
                out = model.lm_gen.step(codes)
                if self._said is not None:
                    batch.said = self._said.tolist()
            finally:
                self._forcing = self._said = None
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
            if not (batch.discard[index] or text_token == UNGENERATED):
                text = self.model.text_of(text_token)
                word = text_token not in self.model.silent_ids and bool(text)
                row.frame(text, codes, word=word, late=late)
                emitted += 1
            self._settle(batch, index, row)
        if late and emitted:
            self._metrics.duplex_late_frames.inc(emitted)

    def step(self, *, late: bool = False) -> None:
        """One whole step, here and now (no clock)."""
        batch = self.gather()
        self.deliver(batch, self.compute(batch), late=late)

    def _settle(self, batch: Batch, index: int, row: Row) -> None:
        """Tell `row`'s queue what its text became where a context token was
        offered, and the session which contexts are now in (after the frame)."""
        offer, queue, said = batch.offers[index], batch.queues[index], batch.said
        if offer is None or said is None or queue is not row.context:
            return  # nothing offered, or the row restarted: its old queue is gone
        for taken in queue.settle(said[index], batch.made[index]):
            row.emit(
                pb.Stage0Event(
                    context_taken=pb.ContextTaken(epoch=taken.epoch, id=taken.id, index=taken.index)
                )
            )

    # ----------------------------------------------------------- forcing
    def _forcing_of(
        self, forced: list[ForcedFrame | None], offers: list[Offer | None]
    ) -> _Forcing | None:
        """The batch's prompt frames and context tokens as tensors (None: no
        row has either)."""
        if all(frame is None for frame in forced) and all(o is None for o in offers):
            return None
        dep_q = self.model.dep_q
        k = next((len(frame.user) for frame in forced if frame is not None), 0)
        user = [frame.user if frame else (0,) * k for frame in forced]
        text = [
            frame.text if frame else offer.token if offer else 0
            for frame, offer in zip(forced, offers, strict=True)
        ]
        agent = [frame.agent if frame else (0,) * dep_q for frame in forced]
        mask = [frame is not None for frame in forced]
        firm = [m or (o is not None and o.firm) for m, o in zip(mask, offers, strict=True)]
        offered = [o is not None and not o.firm for o in offers]
        device = self._device
        return _Forcing(
            mask=torch.tensor(mask, device=device),
            user=torch.tensor(user, dtype=torch.long, device=device),
            text=torch.tensor(text, dtype=torch.long, device=device),
            agent=torch.tensor(agent, dtype=torch.long, device=device),
            firm=torch.tensor(firm, device=device),
            offered=torch.tensor(offered, device=device),
            pads=torch.tensor(sorted(self.model.silent_ids), dtype=torch.long, device=device),
            prompt=any(mask),
            context=any(o is not None for o in offers),
        )

    def _force_text(self, text_token: torch.Tensor) -> None:
        """LMGen's hook on the sampled text tokens [B], before the depth
        transformer reads them: the prompt's rows get theirs, a context's
        token goes in where it is firm or the model would say a word, in place."""
        f = self._forcing
        if f is not None:
            force = f.firm | (f.offered & ~torch.isin(text_token, f.pads))
            text_token.copy_(torch.where(force, f.text, text_token))
            if f.context:
                self._said = text_token.clone()

    def _force_audio(self, audio_tokens: torch.Tensor) -> None:
        """LMGen's hook on the depth transformer's codes [B, dep_q], before
        they are written to the cache (on CUDA, a graph's static output)."""
        f = self._forcing
        if f is not None and f.prompt:
            audio_tokens.copy_(torch.where(f.mask[:, None], f.agent, audio_tokens))

    def fail(self, message: str) -> None:
        """The model failed: every bound session hears so."""
        for row in self._rows:
            if row is not None:
                row.emit(
                    pb.Stage0Event(
                        error=pb.StageError(epoch=row.epoch, code="engine_failed", message=message)
                    )
                )
