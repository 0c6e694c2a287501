"""One session's state on a stage0 `cascade` worker: VAD -> utterance -> ASR -> LLM.

In `semantic_vad` the end-of-turn model (turn.py) may end an utterance
before Silero's silence timeout does; the session sees a server_vad turn.
A session that answers preemptively also hears of the user's first pause in
an utterance, with its text (pauses.py).

The session service drives it with typed requests (`HANDLERS`); it reports
VAD events, transcripts, listen/speak decisions and, through responder.py,
LLM text. Work of an epoch older than the newest one seen is dropped or
aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

from antiphon.common import stage_audio
from antiphon.stage0.backends.cascade.asr.transcript import PendingText, StreamingTranscript
from antiphon.stage0.backends.cascade.listening.partials import Partials
from antiphon.stage0.backends.cascade.listening.pauses import Pause, Pauses
from antiphon.stage0.backends.cascade.listening.turn import (
    WINDOW_SAMPLES,
    SemanticEndpointer,
    TurnBatcher,
    TurnCheck,
    eagerness,
)
from antiphon.stage0.backends.cascade.listening.vad import (
    EndpointerConfig,
    SpeechStarted,
    SpeechStopped,
    VadBatcher,
    VadEvent,
    VadStream,
)
from antiphon.stage0.backends.cascade.models import Engines
from antiphon.stage0.backends.cascade.responder import Responder
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)

BYTES_PER_MS = stage_audio.BYTES_PER_MS
UNFENCED = 1 << 62
# server_vad utterances kept for their commit; more waiting means none is coming.
MAX_SEGMENTED = 4


class CascadeSession:
    def __init__(
        self,
        models: Engines,
        settings: Stage0Settings,
        emit: Callable[[pb.Stage0Event], None],
        metrics: Stage0Metrics,
        vad_batcher: VadBatcher,
        turn_batcher: TurnBatcher,
    ) -> None:
        self._models = models
        self._metrics = metrics
        self._settings = settings
        self._emit = emit
        self._responder = Responder(models.llm, settings, metrics, emit)
        self.session_id = ""
        self._lane: pb.Lane = pb.LANE_MANUAL
        self._skip_vad = False
        self._epoch = 0
        self._vad: VadStream = models.vad.stream()
        self._vad_batcher = vad_batcher
        # semantic_vad: when to ask the end-of-turn model (None: Silero's silence alone).
        self._semantic: SemanticEndpointer | None = None
        self._turn_batcher = turn_batcher
        self._transcript = StreamingTranscript(
            self._asr, segment_ms=int(settings.asr_segment_s * 1000)
        )
        # Audio of the utterance being heard; its start on the stream clock.
        self._utterance = bytearray()
        self._utterance_start_ms = 0
        self._received_ms = 0
        self._next_unit_ms = 0
        # First speech frame of the utterance being heard.
        self._onset_ms = 0
        self._pauses = Pauses(
            after_ms=settings.preempt_after_ms,
            text_until=self._text_until,
            report=self._report_pause,
            resumed=self._report_resumed,
            count=lambda outcome: metrics.pauses.labels(outcome).inc(),
        )
        self._partials = Partials(
            every_ms=settings.asr_partial_interval_ms,
            text_until=self._text_until,
            report=self._report_partial,
            count=metrics.partial_transcripts.inc,
        )
        # server_vad: utterances the VAD ended, waiting for the session's commit.
        # Each is set aside the moment the VAD ends it, because the audio after
        # it is trimmed between utterances and the commit arrives later.
        self._segmented: deque[tuple[bytes, PendingText]] = deque()
        self._tasks: dict[asyncio.Task[Any], int] = {}
        # The instructions whose prompt prefix was last prefilled (None: none yet).
        self._warmed: str | None = None
        # Answers being generated, by response id (one may be dropped alone).
        self._answers: dict[str, asyncio.Task[Any]] = {}

    # ---------------------------------------------------------- requests
    def handle(self, req: pb.Stage0Request) -> None:
        handler = HANDLERS.get(req.WhichOneof("kind") or "")
        if handler is not None:
            handler(self, req)

    def _fenced(self, epoch: int) -> bool:
        """Whether a request of `epoch` is older than a cancel already seen."""
        if epoch < self._epoch:
            return True
        self._epoch = epoch
        return False

    def _audio_request(self, msg: pb.Stage0Audio) -> None:
        if not self._fenced(msg.epoch):
            self._audio(msg.pcm16)

    def _commit(self, msg: pb.Stage0Commit) -> None:
        if self._fenced(msg.epoch):
            return
        pcm, text = self._committed_audio()
        # A committed item is the user's, whatever happens to responses:
        # a later cancel does not stop its transcription.
        self._spawn(self._transcribe_commit(msg.epoch, msg.item_id, pcm, text), fenced=False)

    def _clear_input(self, msg: pb.Stage0ClearInput) -> None:
        if self._fenced(msg.epoch):
            return
        self._drop_segmented()
        self._pauses.drop()
        self._partials.reset()
        self._utterance.clear()
        self._utterance_start_ms = self._received_ms
        self._transcript.reset()
        self._vad.clear()

    def _generate(self, msg: pb.Generate) -> None:
        if self._fenced(msg.epoch):
            return
        answer = self._spawn(self._responder.answer(msg, time.perf_counter(), self.session_id))
        self._answers[msg.response_id] = answer
        answer.add_done_callback(lambda _t: self._answers.pop(msg.response_id, None))

    def _cancel(self, msg: pb.Stage0Cancel) -> None:
        if not self._fenced(msg.epoch):
            self._cancel_before(msg.epoch)

    def _cancel_response(self, msg: pb.StageCancelResponse) -> None:
        """One answer dropped (a preemptive one): nothing more of it is sent."""
        answer = self._answers.pop(msg.response_id, None)
        if answer is not None:
            answer.cancel()

    def _context(self, msg: pb.Stage0Context) -> None:
        """The cascade's model has no running context to put text into: its
        prompt is built from the history at each answer."""
        error = pb.StageError(
            epoch=msg.epoch,
            response_id=msg.id,
            code="unsupported_capability",
            message="this backend takes no text into a running model's context",
        )
        self._emit(pb.Stage0Event(error=error))

    def _configure(self, open_: pb.Stage0Open) -> None:
        self.session_id = open_.session_id or self.session_id
        if self._settings.llm_warm_prefix and open_.instructions != self._warmed:
            self._warmed = open_.instructions
            self._spawn(self._responder.warm(open_.instructions, self.session_id), fenced=False)
        self._lane = open_.lane
        self._skip_vad = open_.skip_vad
        self._pauses.enabled = open_.preemptive and self._lane in (
            pb.LANE_SERVER_VAD,
            pb.LANE_NATIVE,
        )
        self._partials.enabled = self._lane in (pb.LANE_SERVER_VAD, pb.LANE_NATIVE)
        td = open_.turn_detection
        # Without server VAD (manual and native lanes) the VAD still runs,
        # on the endpointer's defaults.
        defaults = EndpointerConfig()
        silence = (
            td.silence_duration_ms
            if td.HasField("silence_duration_ms")
            else defaults.silence_duration_ms
        )
        if self._lane == pb.LANE_NATIVE:
            silence = self._settings.native_silence_ms
        self._semantic = None
        if self._lane == pb.LANE_SERVER_VAD and td.mode == cpb.TURN_DETECTION_MODE_SEMANTIC_VAD:
            # The session's server_vad lane; only the rule that ends a turn differs.
            self._semantic = SemanticEndpointer(eagerness(td.eagerness))
            silence = self._semantic.max_silence_ms
        self._vad.configure(
            EndpointerConfig(
                threshold=td.threshold if td.HasField("threshold") else defaults.threshold,
                prefix_padding_ms=(
                    td.prefix_padding_ms
                    if td.HasField("prefix_padding_ms")
                    else defaults.prefix_padding_ms
                ),
                silence_duration_ms=silence,
            )
        )

    # ------------------------------------------------------------- audio
    def _audio(self, pcm16: bytes) -> None:
        self._utterance += pcm16
        self._received_ms += len(pcm16) // BYTES_PER_MS
        max_bytes = int(self._settings.max_utterance_s * 1000) * BYTES_PER_MS
        if len(self._utterance) > max_bytes:
            drop = len(self._utterance) - max_bytes
            del self._utterance[:drop]
            self._utterance_start_ms += drop // BYTES_PER_MS
        self._transcript.update(self._utterance, self._utterance_start_ms)
        if not self._skip_vad:
            self._vad.push(pcm16)
            self._vad_batcher.submit(self._vad, self._vad_events)

    def _vad_events(self, events: list[VadEvent]) -> None:
        """The VAD has run all audio received so far (in a batch with other sessions)."""
        for event in events:
            if isinstance(event, SpeechStarted):
                self._speech_started(event)
            elif isinstance(event, SpeechStopped):
                if self._semantic is not None:
                    self._metrics.turn_ends.labels("max_silence").inc()
                self._speech_stopped(event)
        if self._semantic is not None:
            self._ask_turn_model(self._semantic)
        self._pauses.watch(self._vad.endpointer)
        self._partials.watch(self._vad.endpointer)
        if self._lane == pb.LANE_NATIVE and self._vad.endpointer.in_speech:
            # A model-unit boundary inside speech: the model keeps listening.
            while self._received_ms >= self._next_unit_ms:
                self._next_unit_ms += self._settings.chunk_period_ms
                self._emit(
                    pb.Stage0Event(
                        unit_decision=pb.UnitDecision(
                            epoch=self._epoch,
                            decision=pb.DECISION_LISTEN,
                            audio_end_ms=self._received_ms,
                        )
                    )
                )
        elif self._lane != pb.LANE_MANUAL and not self._vad.endpointer.in_speech:
            # Between utterances keep only what prefix padding may reach back to.
            keep_ms = self._vad.endpointer.config.prefix_padding_ms + 100
            self._trim_to(self._received_ms - keep_ms)

    def _ask_turn_model(self, semantic: SemanticEndpointer) -> None:
        """semantic_vad: ask Smart Turn about the utterance so far, if a question is due."""
        check = semantic.due(self._vad.endpointer)
        if check is None:
            return
        end = max(0, check.at_ms - self._utterance_start_ms) * BYTES_PER_MS
        clip = bytes(self._utterance[max(0, end - WINDOW_SAMPLES * 2) : end])
        self._turn_batcher.submit(
            self, clip, lambda probability: self._turn_answered(semantic, check, probability)
        )

    def _turn_answered(
        self, semantic: SemanticEndpointer, check: TurnCheck, probability: float
    ) -> None:
        if semantic is not self._semantic:
            return  # reconfigured since it was asked
        stopped = semantic.decide(check, probability, self._vad.endpointer)
        if stopped is not None:
            self._metrics.turn_ends.labels("model").inc()
            self._speech_stopped(stopped)

    def _speech_started(self, ev: SpeechStarted) -> None:
        self._partials.reset()
        self._trim_to(ev.audio_start_ms)
        self._onset_ms = ev.onset_ms
        self._next_unit_ms = self._received_ms + self._settings.chunk_period_ms
        self._emit(
            pb.Stage0Event(
                speech_started=pb.VadSpeechStarted(
                    epoch=self._epoch, audio_start_ms=ev.audio_start_ms
                )
            )
        )

    def _speech_stopped(self, ev: SpeechStopped) -> None:
        self._partials.reset()
        paused = self._pauses.claim(ev)
        self._emit(
            pb.Stage0Event(
                speech_stopped=pb.VadSpeechStopped(
                    epoch=self._epoch,
                    audio_end_ms=ev.audio_end_ms,
                    speech_ms=max(0, ev.offset_ms - self._onset_ms),
                )
            )
        )
        if self._lane == pb.LANE_NATIVE:
            _pcm, text = self._take_utterance(ev.audio_end_ms, paused)
            self._spawn(self._transcribe_utterance(self._epoch, ev.audio_end_ms, text))
        elif self._lane == pb.LANE_SERVER_VAD:
            if len(self._segmented) == MAX_SEGMENTED:
                # Never committed (the session dropped it as a short overlap
                # and its clear was lost, or it is not listening): not a turn.
                self._segmented.popleft()[1].close()
            self._segmented.append(self._take_utterance(ev.audio_end_ms, paused))
        elif paused is not None:
            paused.close()

    def _text_until(self, end_ms: int) -> PendingText:
        """The text of the utterance being heard, up to `end_ms` (a pause's)."""
        cut = max(0, end_ms - self._utterance_start_ms) * BYTES_PER_MS
        return self._transcript.peek(bytes(self._utterance[:cut]), self._utterance_start_ms)

    def _report_pause(self, pause: Pause, text: str) -> None:
        self._emit(
            pb.Stage0Event(
                pause=pb.UtterancePause(
                    epoch=self._epoch, audio_end_ms=pause.audio_end_ms, transcript=text
                )
            )
        )

    def _report_partial(self, text: str) -> None:
        self._emit(pb.Stage0Event(partial=pb.TranscriptPartial(epoch=self._epoch, text=text)))

    def _report_resumed(self, at_ms: int) -> None:
        self._emit(
            pb.Stage0Event(resumed=pb.SpeechResumed(epoch=self._epoch, audio_start_ms=at_ms))
        )

    def _trim_to(self, start_ms: int) -> None:
        drop_ms = start_ms - self._utterance_start_ms
        if drop_ms > 0:
            del self._utterance[: drop_ms * BYTES_PER_MS]
            self._utterance_start_ms = start_ms

    def _take_utterance(
        self, end_ms: int | None = None, known: PendingText | None = None
    ) -> tuple[bytes, PendingText]:
        """The utterance's audio up to `end_ms` (all of it by default), and its
        text once the last of it is transcribed (or `known`: a pause's, the turn
        having ended in it). Audio after `end_ms` (received before the VAD
        caught up, or burst ahead) starts the next utterance."""
        cut = len(self._utterance)
        if end_ms is not None:
            cut = min(cut, max(0, end_ms - self._utterance_start_ms) * BYTES_PER_MS)
        pcm = bytes(self._utterance[:cut])
        text = self._transcript.take(pcm, self._utterance_start_ms)
        if known is not None:
            text.close()
            text = known
        del self._utterance[:cut]
        self._utterance_start_ms += cut // BYTES_PER_MS
        return pcm, text

    def _drop_segmented(self) -> None:
        for _pcm, text in self._segmented:
            text.close()
        self._segmented.clear()

    def _committed_audio(self) -> tuple[bytes, PendingText]:
        """What a commit seals: the utterances the VAD ended, if any are waiting
        (server_vad), else everything heard since the last commit."""
        if not self._segmented:
            return self._take_utterance()
        taken = list(self._segmented)
        self._segmented.clear()
        if len(taken) == 1:
            return taken[0]

        async def joined() -> str:
            texts = [await text for _pcm, text in taken]
            return " ".join(t for t in texts if t)

        return b"".join(pcm for pcm, _text in taken), joined()

    # ------------------------------------------------------------- tasks
    def _spawn(self, coro: Any, *, fenced: bool = True) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        # Unfenced work is never cancelled by an epoch (only by closing).
        self._tasks[task] = self._epoch if fenced else UNFENCED
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("stage0 task failed", exc_info=task.exception())

    def _cancel_before(self, epoch: int) -> None:
        for task, task_epoch in list(self._tasks.items()):
            if task_epoch < epoch:
                task.cancel()

    async def _asr(self, pcm: bytes) -> str:
        with self._metrics.queue_depth.labels("asr").track_inprogress():
            return await self._models.transcribe(pcm)

    async def _transcribed(self, text: PendingText) -> str:
        # What the user waits for: only the tail of the utterance is left by now.
        with self._metrics.asr_latency.time():
            return await text

    async def _transcribe_commit(
        self, epoch: int, item_id: str, pcm: bytes, text: PendingText
    ) -> None:
        heard = await self._transcribed(text)
        self._emit(
            pb.Stage0Event(
                transcript=pb.Transcript(
                    epoch=epoch, item_id=item_id, text=heard, audio_ms=len(pcm) // BYTES_PER_MS
                )
            )
        )
        self._responder.prepare("user", heard)

    async def _transcribe_utterance(self, epoch: int, end_ms: int, text: PendingText) -> None:
        heard = await self._transcribed(text)
        # The cascade's policy: speak after any utterance with words in it.
        decision = pb.DECISION_SPEAK if heard.strip() else pb.DECISION_LISTEN
        self._emit(
            pb.Stage0Event(
                utterance=pb.Utterance(
                    epoch=epoch, transcript=heard, audio_end_ms=end_ms, decision=decision
                )
            )
        )
        self._responder.prepare("user", heard)

    async def close(self) -> None:
        self._vad_batcher.discard(self._vad)
        self._turn_batcher.discard(self)
        self._pauses.drop()
        self._partials.reset()
        self._drop_segmented()
        self._transcript.reset()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


# What each request does, by its oneof field; tests/stage0/test_request_kinds.py
# holds the keys to the proto, mypy each field to its handler's type.
HANDLERS: Final[Mapping[str, Callable[[CascadeSession, pb.Stage0Request], None]]] = {
    "open": lambda s, req: s._configure(req.open),
    "configure": lambda s, req: s._configure(req.configure),
    "audio": lambda s, req: s._audio_request(req.audio),
    "commit": lambda s, req: s._commit(req.commit),
    "clear_input": lambda s, req: s._clear_input(req.clear_input),
    "generate": lambda s, req: s._generate(req.generate),
    "cancel": lambda s, req: s._cancel(req.cancel),
    "cancel_response": lambda s, req: s._cancel_response(req.cancel_response),
    "context": lambda s, req: s._context(req.context),
}
# Kinds the cascade has nothing to do with, and why.
IGNORED: Final[Mapping[str, str]] = {
    "tool_output": "function results reach the cascade's LLM in the history of each generate",
}
