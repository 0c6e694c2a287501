"""One session's requests on a frame backend (`mimi`, `nemotron`): its row of
the model's lockstep batch.

The session sends every frame the model makes, talking or not, and each is
decoded in order so the model's state runs on; a frame of a response
comes back as an 80 ms `AudioChunk` carrying its text, the others are
decoded and dropped. A final `SynthesizeText` ends a response once every
frame sent before it is decoded. A cancel fences out older epochs: their
frames are still decoded (the stream must stay continuous) but neither
their audio nor their `SynthesisDone` is sent.

What differs between the backends is a `FrameForm`: which of the frame's
fields the model reads (Mimi: its audio codes; Nemotron's EAR-TTS: its text
token), the rate the model speaks, and whether a chunk may claim that its
text ends with its audio.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

import numpy as np
import numpy.typing as npt

from antiphon.common.audio import float32_to_pcm16
from antiphon.stage1.frames.resampler import FrameResampler
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)

# One frame's samples at the model's rate, in [-1, 1].
Pcm = npt.NDArray[np.floating[Any]]

# Frames one session may have waiting (some 5 s). Stage0 sends one per 80 ms
# and a step decodes one per row, so only a stalled decoder gets here; then
# newer frames are dropped rather than queued without end.
MAX_QUEUED_FRAMES = 64


@dataclass(frozen=True)
class FrameForm:
    """What a backend's model reads of a frame and how its audio comes back."""

    # The DecodeFrame field whose values the model steps on.
    reads: Literal["codes", "tokens"]
    # The model's own rate and frame; sessions get it resampled to theirs.
    rate: int
    frame_ms: int
    # One AudioTextMark per chunk (its text ends with its audio): only where
    # the model's audio for a frame is the frame's text (`supports_audio_truncate`).
    marks: bool


class Decoder(Protocol):
    """What a session needs of the model its row is on: a lockstep in this
    process (frames/lockstep.Lockstep), or a stepper's reached from a front
    end (backends/mimi/front_end.FrontEndDecoder)."""

    @property
    def frame_width(self) -> int:
        """Values each frame carries (Mimi: one code per codebook)."""
        ...

    @property
    def cardinality(self) -> int: ...

    def acquire(self, row: FrameSession) -> int | None: ...

    def release(self, slot: int, row: FrameSession) -> None: ...

    def framed(self, slot: int, codes: Sequence[int]) -> None:
        """Row `slot` has a new frame, whose values are `codes`."""
        ...

    def dropped(self) -> None: ...


@dataclass
class _Done:
    epoch: int
    response_id: str


@dataclass
class _Queued:
    frame: pb.DecodeFrame
    # Responses that end once this frame is decoded.
    dones: list[_Done] = field(default_factory=list)


@dataclass
class _Timing:
    """When a response's first frame came in, and its first audio went out."""

    epoch: int
    first_frame: float
    first_audio: float | None = None


class FrameSession:
    def __init__(
        self,
        lockstep: Decoder,
        metrics: Stage1Metrics,
        emit: Callable[[pb.Stage1Event], None],
        form: FrameForm,
    ) -> None:
        self._lockstep = lockstep
        self._metrics = metrics
        self._emit = emit
        self._form = form
        self._slot: int | None = None
        self._out = FrameResampler(form.rate, form.rate, form.frame_ms)
        self._epoch = 0
        self._queue: deque[_Queued] = deque()
        self._timings: dict[str, _Timing] = {}
        self._overflowing = False

    # --- requests ---------------------------------------------------------

    def handle(self, req: pb.Stage1Request) -> None:
        handler = HANDLERS.get(req.WhichOneof("kind") or "")
        if handler is not None:
            handler(self, req)

    def _cancel(self, msg: pb.Stage1Cancel) -> None:
        self._epoch = max(self._epoch, msg.epoch)
        self._timings = {k: t for k, t in self._timings.items() if t.epoch >= self._epoch}

    def _open(self, msg: pb.Stage1Open) -> None:
        # The session's output rate (8 kHz for G.711); 0 keeps the model's own.
        rate = msg.sample_rate_hz or self._form.rate
        if rate != self._out.out_rate:
            self._out = FrameResampler(self._form.rate, rate, self._form.frame_ms)
        if self._slot is not None:
            return
        self._slot = self._lockstep.acquire(self)
        if self._slot is None:
            self._error(0, "", "unavailable", "every decoder row is taken")

    def _frame(self, frame: pb.DecodeFrame) -> None:
        if self._slot is None:
            log.warning("a decode frame before the session opened: dropped")
            return
        values = self._values(frame)
        width, cardinality = self._lockstep.frame_width, self._lockstep.cardinality
        if len(values) != width or not all(0 <= v < cardinality for v in values):
            self._error(
                frame.epoch,
                frame.response_id,
                "invalid_frame",
                f"frame {frame.index}: want {width} {self._form.reads} in "
                f"[0, {cardinality}), got {list(values)}",
            )
            return
        if len(self._queue) >= MAX_QUEUED_FRAMES:
            if not self._overflowing:
                log.warning(
                    "decoder behind: %d frames queued, newer ones dropped", MAX_QUEUED_FRAMES
                )
            self._overflowing = True
            self._lockstep.dropped()
            return
        self._overflowing = False
        self._epoch = max(self._epoch, frame.epoch)
        if frame.response_id and frame.epoch >= self._epoch:
            self._timings.setdefault(frame.response_id, _Timing(frame.epoch, time.perf_counter()))
        self._queue.append(_Queued(frame))
        self._lockstep.framed(self._slot, values)

    def _values(self, frame: pb.DecodeFrame) -> Sequence[int]:
        return frame.tokens if self._form.reads == "tokens" else frame.codes

    def _text(self, msg: pb.SynthesizeText) -> None:
        # Nothing to speak from text here: the model's own frames are the speech.
        if not msg.final or not msg.response_id or msg.epoch < self._epoch:
            return
        self._epoch = msg.epoch
        done = _Done(msg.epoch, msg.response_id)
        if self._queue:
            self._queue[-1].dones.append(done)
        else:
            self._finish(done)

    # --- the decoder row (frames/lockstep.DecodeRow) ----------------------

    def queued(self) -> int:
        return len(self._queue)

    def head_codes(self) -> Sequence[int] | None:
        return self._values(self._queue[0].frame) if self._queue else None

    def decoded(self, pcm: Pcm) -> bool:
        queued = self._queue.popleft()
        frame = queued.frame
        # Every frame goes through the resampler, so a session's audio is one
        # continuous stream at its rate whichever frames are sent.
        pcm16 = self._out.process(float32_to_pcm16(pcm))
        sent = bool(frame.response_id) and frame.epoch >= self._epoch
        if sent:
            self._first_audio(frame.response_id)
            marks = []
            if frame.text and self._form.marks:
                marks.append(
                    cpb.AudioTextMark(text_chars=len(frame.text), audio_end_ms=self._form.frame_ms)
                )
            self._emit(
                pb.Stage1Event(
                    audio=pb.AudioChunk(
                        epoch=frame.epoch,
                        response_id=frame.response_id,
                        pcm16=pcm16,
                        sample_rate_hz=self._out.out_rate,
                        text=frame.text,
                        duration_ms=self._form.frame_ms,
                        marks=marks,
                    )
                )
            )
        for done in queued.dones:
            self._finish(done)
        return sent

    def lost(self) -> None:
        """The oldest frame's audio was lost on its way back (a front end too
        far behind its stepper): nothing is sent for it, its responses end."""
        for done in self._queue.popleft().dones:
            self._finish(done)

    # --- responses --------------------------------------------------------

    def _first_audio(self, response_id: str) -> None:
        timing = self._timings.get(response_id)
        if timing is not None and timing.first_audio is None:
            timing.first_audio = time.perf_counter()
            self._metrics.first_audio.observe(timing.first_audio - timing.first_frame)

    def _finish(self, done: _Done) -> None:
        if done.epoch < self._epoch:
            return  # cancelled while its frames were decoded
        timing = self._timings.pop(done.response_id, None)
        first_audio_ms = 0.0
        if timing is not None and timing.first_audio is not None:
            first_audio_ms = (timing.first_audio - timing.first_frame) * 1000
        self._emit(
            pb.Stage1Event(
                done=pb.SynthesisDone(
                    epoch=done.epoch, response_id=done.response_id, first_audio_ms=first_audio_ms
                )
            )
        )

    def engine_lost(self, reason: str) -> None:
        """Its decoder is gone (a front end's stepper): the worker stops."""
        self._error(0, "", "engine_failed", reason)

    def _error(self, epoch: int, response_id: str, code: str, message: str) -> None:
        self._emit(error_event(epoch, response_id, code, message))

    async def close(self) -> None:
        if self._slot is not None:
            self._lockstep.release(self._slot, self)
            self._slot = None
        self._queue.clear()


def error_event(epoch: int, response_id: str, code: str, message: str) -> pb.Stage1Event:
    """A session's typed error, as a model-native backend sends it."""
    error = pb.StageError(epoch=epoch, response_id=response_id, code=code, message=message)
    return pb.Stage1Event(error=error)


# What each request does, by its oneof field; tests/stage1/test_request_kinds.py
# holds the keys to the proto, mypy each field to its handler's type.
HANDLERS: Final[Mapping[str, Callable[[FrameSession, pb.Stage1Request], None]]] = {
    "open": lambda s, req: s._open(req.open),
    "frame": lambda s, req: s._frame(req.frame),
    "text": lambda s, req: s._text(req.text),
    "cancel": lambda s, req: s._cancel(req.cancel),
}
# Kinds this backend has nothing to do with, and why.
IGNORED: Final[Mapping[str, str]] = {
    "cancel_response": "a model-native session is never asked for a preemptive answer",
}
