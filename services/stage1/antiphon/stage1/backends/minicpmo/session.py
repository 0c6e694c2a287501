"""One session's requests on the `minicpmo` worker: a unit of the thinker
in, a second of its speech out.

Stage0 answers every second of input with a frame (a `DecodeFrame` here):
one the model speaks carries a response and the unit's text tokens, the
others nothing. Frames are spoken in order, one at a time, on the worker's
model thread (voice.py); a spoken unit comes back as one `AudioChunk`
carrying its text. A final `SynthesizeText` ends a response once every frame
sent before it is spoken. A cancel fences out older epochs: their frames are
not spoken, and the turn they were in is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from antiphon.common.audio import StreamResampler, float32_to_pcm16
from antiphon.stage1.backends.minicpmo.voice import Turn, Voice
from antiphon.stage1.frames.session import error_event
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)

# Units one session may have waiting (8 s of the thinker's answers). Stage0
# sends one a second and each is spoken well within it, so only a stalled
# model gets here; then newer units are dropped rather than queued without end.
MAX_QUEUED_UNITS = 8


class UnitMetrics:
    """The `minicpmo` worker's own: what a unit costs and what became of it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.unit_seconds = Histogram(
            "antiphon_stage1_duplex_unit_seconds",
            "One spoken unit, from its turn in the batch queue to its audio: the talker's "
            "codes and token2wav's audio (real time: < 1 s)",
            buckets=(0.025, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 5.0),
            registry=registry,
        )
        self.batch_units = Histogram(
            "antiphon_stage1_duplex_batch_units",
            "Units (one a speaking session) spoken together in one batch of the models",
            buckets=(1, 2, 4, 8, 16, 24, 32, 48, 64),
            registry=registry,
        )
        self.units = Counter(
            "antiphon_stage1_duplex_units",
            "Units; spoken (a response's, sent), silent (the model listened, or its "
            "response was cancelled) or dropped (the session's queue was full)",
            ["outcome"],
            registry=registry,
        )


@dataclass
class _Done:
    epoch: int
    response_id: str


@dataclass
class _Queued:
    frame: pb.DecodeFrame
    # Responses that end once this frame is spoken.
    dones: list[_Done] = field(default_factory=list)


class UnitSession:
    def __init__(
        self,
        voice: Voice,
        metrics: Stage1Metrics,
        units: UnitMetrics,
        emit: Callable[[pb.Stage1Event], None],
    ) -> None:
        self._voice = voice
        self._metrics = metrics
        self._units = units
        self._emit = emit
        self._out = StreamResampler(voice.rate, voice.rate)
        self._epoch = 0
        self._queue: deque[_Queued] = deque()
        self._ready = asyncio.Event()
        self._speaking: asyncio.Task[None] | None = None
        self._turn: Turn | None = None
        # Turns this session has spoken, and its session's share of the seed.
        self._turns = 0
        self._seed_base = 0
        # Responses whose first audio has not gone out yet: when their first frame came.
        self._first_frames: dict[str, float] = {}

    # --- requests ---------------------------------------------------------

    def handle(self, req: pb.Stage1Request) -> None:
        handler = HANDLERS.get(req.WhichOneof("kind") or "")
        if handler is not None:
            handler(self, req)

    def _open(self, msg: pb.Stage1Open) -> None:
        self._seed_base = zlib.crc32(msg.session_id.encode()) << 8
        # The session's output rate (8 kHz for G.711); 0 keeps the model's own.
        rate = msg.sample_rate_hz or self._voice.rate
        if rate != self._out.out_rate:
            self._out = StreamResampler(self._voice.rate, rate)
        if self._speaking is None:
            self._speaking = asyncio.create_task(self._speak())

    def _frame(self, frame: pb.DecodeFrame) -> None:
        if self._speaking is None:
            log.warning("a decode frame before the session opened: dropped")
            return
        vocabulary = self._voice.vocabulary
        if not all(0 <= t < vocabulary for t in frame.tokens):
            self._error(
                frame.epoch,
                frame.response_id,
                "invalid_frame",
                f"unit {frame.index}: text tokens must be in [0, {vocabulary}), "
                f"got {list(frame.tokens)}",
            )
            return
        if len(self._queue) >= MAX_QUEUED_UNITS:
            log.warning("talker behind: %d units queued, newer ones dropped", MAX_QUEUED_UNITS)
            self._units.units.labels("dropped").inc()
            return
        self._epoch = max(self._epoch, frame.epoch)
        if frame.response_id:
            self._first_frames.setdefault(frame.response_id, time.perf_counter())
        self._queue.append(_Queued(frame))
        self._ready.set()

    def _text(self, msg: pb.SynthesizeText) -> None:
        # Nothing to speak from text here: the thinker's units are the speech.
        if not msg.final or not msg.response_id or msg.epoch < self._epoch:
            return
        self._epoch = msg.epoch
        done = _Done(msg.epoch, msg.response_id)
        if self._queue:
            self._queue[-1].dones.append(done)
        else:
            self._finish(done)

    def _cancel(self, msg: pb.Stage1Cancel) -> None:
        self._epoch = max(self._epoch, msg.epoch)
        self._first_frames.clear()

    # --- speaking ---------------------------------------------------------

    async def _speak(self) -> None:
        while True:
            while not self._queue:
                self._ready.clear()
                await self._ready.wait()
            queued = self._queue[0]
            try:
                await self._unit(queued.frame)
            except Exception as exc:
                log.exception("the talker failed a unit")
                self._error(queued.frame.epoch, queued.frame.response_id, "model_error", str(exc))
                self._turn = None
            self._queue.popleft()
            for done in queued.dones:
                self._finish(done)

    async def _unit(self, frame: pb.DecodeFrame) -> None:
        if not frame.response_id or frame.epoch < self._epoch:
            # Listening, or a cancelled answer: an open turn is over.
            self._turn = None
            self._units.units.labels("silent").inc()
            return
        if self._turn is None:
            self._turns += 1
            self._turn = self._voice.turn(self._seed_base + self._turns)
        start = time.perf_counter()
        samples = await self._voice.speak(self._turn, frame.tokens)
        self._units.unit_seconds.observe(time.perf_counter() - start)
        if self._voice.turn_eos in frame.tokens:
            self._turn = None
        if frame.epoch < self._epoch:  # cancelled while it was spoken
            self._turn = None
            self._units.units.labels("silent").inc()
            return
        pcm16 = self._out.process(float32_to_pcm16(samples))
        duration_ms = round(1000 * len(pcm16) / 2 / self._out.out_rate)
        self._first_audio(frame.response_id)
        self._units.units.labels("spoken").inc()
        self._emit(
            pb.Stage1Event(
                audio=pb.AudioChunk(
                    epoch=frame.epoch,
                    response_id=frame.response_id,
                    pcm16=pcm16,
                    sample_rate_hz=self._out.out_rate,
                    text=frame.text,
                    duration_ms=duration_ms,
                    marks=[cpb.AudioTextMark(text_chars=len(frame.text), audio_end_ms=duration_ms)]
                    if frame.text
                    else [],
                )
            )
        )

    def _first_audio(self, response_id: str) -> None:
        first_frame = self._first_frames.pop(response_id, None)
        if first_frame is not None:
            self._metrics.first_audio.observe(time.perf_counter() - first_frame)

    def _finish(self, done: _Done) -> None:
        if done.epoch < self._epoch:
            return  # cancelled while its units were spoken
        self._first_frames.pop(done.response_id, None)
        self._emit(
            pb.Stage1Event(done=pb.SynthesisDone(epoch=done.epoch, response_id=done.response_id))
        )

    def _error(self, epoch: int, response_id: str, code: str, message: str) -> None:
        self._emit(error_event(epoch, response_id, code, message))

    async def close(self) -> None:
        if self._speaking is not None:
            self._speaking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._speaking
            self._speaking = None
        self._queue.clear()
        self._turn = None


# What each request does, by its oneof field; tests/stage1/test_request_kinds.py
# holds the keys to the proto, mypy each field to its handler's type.
HANDLERS: Final[Mapping[str, Callable[[UnitSession, pb.Stage1Request], None]]] = {
    "open": lambda s, req: s._open(req.open),
    "frame": lambda s, req: s._frame(req.frame),
    "text": lambda s, req: s._text(req.text),
    "cancel": lambda s, req: s._cancel(req.cancel),
}
# Kinds this backend has nothing to do with, and why.
IGNORED: Final[Mapping[str, str]] = {
    "cancel_response": "a model-native session is never asked for a preemptive answer",
}
