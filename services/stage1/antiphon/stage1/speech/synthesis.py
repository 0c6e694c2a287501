"""One session's speech synthesis on a stage1 worker.

Text arrives as the LLM streams it; complete clauses are synthesised in
order while later text keeps arriving, so the first clause is heard before
the answer is finished. When the listener is about to run out of audio and
no clause is ready, the words already written are spoken (playout.py). A
cancel fences out everything of older epochs. A clause the voice fails on
ends its response with an error (no `done`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Final

from antiphon.common.audio import resample_pcm16
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.speech.clauses import ClauseSplitter
from antiphon.stage1.speech.playout import Playout
from antiphon.stage1.speech.scheduler import SynthesisScheduler
from antiphon.stage1.speech.voice import SpeechChunk, Voice
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)


class _Work:
    """A clause to speak, or the end of a response (`final`)."""

    def __init__(self, epoch: int, response_id: str, text: str, final: bool) -> None:
        self.epoch = epoch
        self.response_id = response_id
        self.text = text
        self.final = final
        self.queued_at = time.perf_counter()


class SynthesisSession:
    def __init__(
        self,
        tts: Voice,
        scheduler: SynthesisScheduler,
        metrics: Stage1Metrics,
        emit: Callable[[pb.Stage1Event], None],
        *,
        first_clause_words: int = 0,
        underrun_guard_ms: int = 0,
    ) -> None:
        self._first_clause_words = first_clause_words
        self._playout = Playout(
            guard_s=underrun_guard_ms / 1000, on_running_out=self._speak_written
        )
        # Clauses queued and not yet spoken, per response.
        self._waiting: collections.Counter[str] = collections.Counter()
        self._out_rate = tts.out_rate
        self._speed = 1.0
        self._tts = tts
        self._scheduler = scheduler
        self._metrics = metrics
        self._emit = emit
        self._epoch = 0
        self._splitters: dict[str, ClauseSplitter] = {}
        self._first_text: dict[str, float] = {}
        self._first_audio: dict[str, float] = {}
        # Responses whose rest is not spoken: a clause of theirs the voice failed
        # on, or the session dropped them (a preemptive answer it discarded).
        self._unspoken: set[str] = set()
        self._queue: asyncio.Queue[_Work] = asyncio.Queue()
        self._worker = asyncio.create_task(self._run())

    def handle(self, req: pb.Stage1Request) -> None:
        handler = HANDLERS.get(req.WhichOneof("kind") or "")
        if handler is not None:
            handler(self, req)

    def _open(self, msg: pb.Stage1Open) -> None:
        # The session's output rate (8 kHz for G.711); 0 keeps the voice's own.
        self._out_rate = msg.sample_rate_hz or self._tts.out_rate
        self._speed = msg.speed or 1.0

    def _fenced(self, epoch: int) -> bool:
        """Whether a request of `epoch` is older than a cancel already seen."""
        if epoch < self._epoch:
            return True
        self._epoch = epoch
        return False

    def _cancel(self, msg: pb.Stage1Cancel) -> None:
        if not self._fenced(msg.epoch):
            self._splitters.clear()
            self._playout.clear()
            self._unspoken.clear()  # their work is all of older epochs now

    def _cancel_response(self, msg: pb.StageCancelResponse) -> None:
        """One response dropped: what is queued of it is not spoken, and it gets no `done`."""
        rid = msg.response_id
        self._unspoken.add(rid)
        self._playout.forget(rid)
        if self._splitters.pop(rid, None) is not None:
            # Its end, so that `_done` forgets it; no `final` will come for it now.
            self._queue.put_nowait(_Work(self._epoch, rid, "", final=True))
        elif rid not in self._first_text:
            self._unspoken.discard(rid)  # it never had text: nothing of it is queued

    def _text(self, msg: pb.SynthesizeText) -> None:
        if self._fenced(msg.epoch):
            return
        rid = msg.response_id
        splitter = self._splitters.setdefault(
            rid, ClauseSplitter(first_words=self._first_clause_words)
        )
        self._first_text.setdefault(rid, time.perf_counter())
        for clause in splitter.feed(msg.text):
            self._enqueue(msg.epoch, rid, clause)
        if msg.final:
            rest = splitter.flush()
            if rest:
                self._enqueue(msg.epoch, rid, rest)
            self._queue.put_nowait(_Work(msg.epoch, rid, "", final=True))
            del self._splitters[rid]
        elif self._playout.running_out(rid):
            self._speak_written(rid)

    def _enqueue(self, epoch: int, rid: str, clause: str) -> None:
        self._waiting[rid] += 1
        self._queue.put_nowait(_Work(epoch, rid, clause, final=False))

    def _speak_written(self, rid: str) -> None:
        """The listener is about to run out of `rid`'s audio: with no clause of
        it waiting, its whole words written so far are spoken now."""
        splitter = self._splitters.get(rid)
        if splitter is None or self._waiting[rid]:
            return
        words = splitter.take_words()
        if words:
            self._metrics.early_cuts.inc()
            self._enqueue(self._epoch, rid, words)

    async def _run(self) -> None:
        while True:
            work = await self._queue.get()
            if work.final:
                self._done(work)
                continue
            try:
                if self._wanted(work):
                    await self._clause(work)
            finally:
                self._waiting[work.response_id] -= 1
                if not self._waiting[work.response_id]:
                    del self._waiting[work.response_id]

    def _done(self, work: _Work) -> None:
        """The end of a response: `done`, unless it was cancelled or failed."""
        failed = work.response_id in self._unspoken
        self._unspoken.discard(work.response_id)
        self._playout.forget(work.response_id)
        started = self._first_text.pop(work.response_id, time.perf_counter())
        first = self._first_audio.pop(work.response_id, started)
        if failed or work.epoch < self._epoch:
            return
        self._emit(
            pb.Stage1Event(
                done=pb.SynthesisDone(
                    epoch=work.epoch,
                    response_id=work.response_id,
                    first_audio_ms=(first - started) * 1000,
                )
            )
        )

    async def _clause(self, work: _Work) -> None:
        try:
            voiced = await self._scheduler.run(
                functools.partial(self._speak, work.text),
                first=work.response_id not in self._first_audio,
                wanted=functools.partial(self._wanted, work),
            )
        except Exception as exc:
            # The voice failed on this clause: its response ends here, with
            # an error, and the session's later responses are still spoken.
            log.exception("synthesis failed")
            self._unspoken.add(work.response_id)
            self._emit(
                pb.Stage1Event(
                    error=pb.StageError(
                        epoch=work.epoch,
                        response_id=work.response_id,
                        code="synthesis_failed",
                        message=str(exc),
                    )
                )
            )
            return
        now = time.perf_counter()
        if voiced is None or not self._wanted(work):
            return  # cancelled while waiting or synthesising: never send it
        taken_up, chunks = voiced
        total_ms = sum(c.duration_ms for c in chunks)
        if total_ms:
            self._metrics.rtf.observe((now - taken_up) * 1000 / total_ms)
        if work.response_id not in self._first_audio and chunks:
            self._first_audio[work.response_id] = now
            self._observe_first_audio(work, taken_up, now)
        for chunk in chunks:
            pcm = resample_pcm16(chunk.pcm16, self._tts.out_rate, self._out_rate)
            self._emit(pb.Stage1Event(audio=_audio_chunk(work, chunk, pcm, self._out_rate)))
        self._playout.sent(work.response_id, total_ms / 1000)

    def _observe_first_audio(self, work: _Work, taken_up: float, now: float) -> None:
        """A response's first text -> first audio, and its parts (metrics.py)."""
        started = self._first_text.get(work.response_id, work.queued_at)
        self._metrics.first_audio.observe(now - started)
        self._metrics.first_audio_words.observe(work.queued_at - started)
        self._metrics.first_audio_queue.observe(taken_up - work.queued_at)
        self._metrics.first_audio_voice.observe(now - taken_up)

    def _wanted(self, work: _Work) -> bool:
        return work.epoch >= self._epoch and work.response_id not in self._unspoken

    def _speak(self, text: str) -> tuple[float, list[SpeechChunk]]:
        """On the voice thread: when it took the clause up, and the clause's audio."""
        taken_up = time.perf_counter()
        return taken_up, list(self._tts.synthesize(text, self._speed))

    async def close(self) -> None:
        self._worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._worker


def _audio_chunk(work: _Work, chunk: SpeechChunk, pcm16: bytes, rate: int) -> pb.AudioChunk:
    return pb.AudioChunk(
        epoch=work.epoch,
        response_id=work.response_id,
        pcm16=pcm16,
        sample_rate_hz=rate,
        text=chunk.text,
        duration_ms=chunk.duration_ms,
        marks=[cpb.AudioTextMark(text_chars=c, audio_end_ms=ms) for c, ms in chunk.marks],
    )


# What each request does, by its oneof field; tests/stage1/test_request_kinds.py
# holds the keys to the proto, mypy each field to its handler's type.
HANDLERS: Final[Mapping[str, Callable[[SynthesisSession, pb.Stage1Request], None]]] = {
    "open": lambda s, req: s._open(req.open),
    "text": lambda s, req: s._text(req.text),
    "cancel": lambda s, req: s._cancel(req.cancel),
    "cancel_response": lambda s, req: s._cancel_response(req.cancel_response),
}
# Kinds a text voice has nothing to do with, and why.
IGNORED: Final[Mapping[str, str]] = {
    "frame": "a text voice decodes no model frames (the session sends them to mimi only)",
}
