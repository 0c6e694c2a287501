"""One session's state on a stage0 `cascade` worker: VAD -> utterance -> ASR -> LLM.

In `semantic_vad` the end-of-turn model (turn.py) may end an utterance
before Silero's silence timeout does; the session sees a server_vad turn.

The session service drives it with typed requests; it reports VAD events,
transcripts, listen/speak decisions and LLM text. Work of an epoch older
than the newest one seen is dropped or aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from antiphon.common import stage_audio
from antiphon.stage0 import history, tools
from antiphon.stage0.generation import GenerationMetrics, PromptTooLongError
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.models import Engines
from antiphon.stage0.prompt import preamble_for, with_preamble
from antiphon.stage0.settings import Stage0Settings
from antiphon.stage0.transcript import PendingText, StreamingTranscript
from antiphon.stage0.turn import (
    WINDOW_SAMPLES,
    SemanticEndpointer,
    TurnBatcher,
    TurnCheck,
    eagerness,
    window,
)
from antiphon.stage0.vad import (
    EndpointerConfig,
    SpeechStarted,
    SpeechStopped,
    VadBatcher,
    VadEvent,
    VadStream,
)
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)

BYTES_PER_MS = stage_audio.BYTES_PER_MS
UNFENCED = 1 << 62
# server_vad utterances kept for their commit; more waiting means none is coming.
MAX_SEGMENTED = 4


def merge_deltas(last: pb.Stage0Event, new: pb.Stage0Event) -> pb.Stage0Event | None:
    """`new` folded into `last` (both still unsent) when both are text deltas of
    one response (same id and epoch): a delta's text only ever extends what came
    before it (the session speaks or shows it as it comes), so one delta of
    both texts says the same. None for anything else. A field added to
    `GenerationDelta` must be merged here too."""
    if last.WhichOneof("kind") != "delta" or new.WhichOneof("kind") != "delta":
        return None
    into, more = last.delta, new.delta
    if into.response_id != more.response_id or into.epoch != more.epoch:
        return None
    into.text += more.text
    return last


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
        # server_vad: utterances the VAD ended, waiting for the session's commit.
        # Each is set aside the moment the VAD ends it, because the audio after
        # it is trimmed between utterances and the commit arrives later.
        self._segmented: deque[tuple[bytes, PendingText]] = deque()
        self._tasks: dict[asyncio.Task[Any], int] = {}

    # ---------------------------------------------------------- requests
    def handle(self, req: pb.Stage0Request) -> None:
        kind = req.WhichOneof("kind")
        if kind in ("open", "configure"):
            self._configure(getattr(req, kind))
            return
        msg = getattr(req, kind)
        if msg.epoch < self._epoch:
            return  # fenced out: older than a cancel already seen
        self._epoch = max(self._epoch, msg.epoch)
        if kind == "audio":
            self._audio(msg.pcm16)
        elif kind == "commit":
            pcm, text = self._committed_audio()
            # A committed item is the user's, whatever happens to responses:
            # a later cancel does not stop its transcription.
            self._spawn(self._transcribe_commit(msg.epoch, msg.item_id, pcm, text), fenced=False)
        elif kind == "clear_input":
            self._drop_segmented()
            self._utterance.clear()
            self._utterance_start_ms = self._received_ms
            self._transcript.reset()
            self._vad.clear()
        elif kind == "generate":
            self._spawn(self._generate(msg, time.perf_counter()))
        elif kind == "cancel":
            self._cancel_before(msg.epoch)

    def _configure(self, open_: pb.Stage0Open) -> None:
        self.session_id = open_.session_id or self.session_id
        self._lane = open_.lane
        self._skip_vad = open_.skip_vad
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
        audio = window(bytes(self._utterance[max(0, end - WINDOW_SAMPLES * 2) : end]))
        self._turn_batcher.submit(
            self, audio, lambda probability: self._turn_answered(semantic, check, probability)
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
            _pcm, text = self._take_utterance(ev.audio_end_ms)
            self._spawn(self._transcribe_utterance(self._epoch, ev.audio_end_ms, text))
        elif self._lane == pb.LANE_SERVER_VAD:
            if len(self._segmented) == MAX_SEGMENTED:
                # Never committed (the session dropped it as a short overlap
                # and its clear was lost, or it is not listening): not a turn.
                self._segmented.popleft()[1].close()
            self._segmented.append(self._take_utterance(ev.audio_end_ms))

    def _trim_to(self, start_ms: int) -> None:
        drop_ms = start_ms - self._utterance_start_ms
        if drop_ms > 0:
            del self._utterance[: drop_ms * BYTES_PER_MS]
            self._utterance_start_ms = start_ms

    def _take_utterance(self, end_ms: int | None = None) -> tuple[bytes, PendingText]:
        """The utterance's audio up to `end_ms` (all of it by default), and its
        text once the last of it is transcribed. Audio after `end_ms` (received
        before the VAD caught up, or burst ahead) starts the next utterance."""
        cut = len(self._utterance)
        if end_ms is not None:
            cut = min(cut, max(0, end_ms - self._utterance_start_ms) * BYTES_PER_MS)
        pcm = bytes(self._utterance[:cut])
        text = self._transcript.take(pcm, self._utterance_start_ms)
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
    def _spawn(self, coro: Any, *, fenced: bool = True) -> None:
        task = asyncio.create_task(coro)
        # Unfenced work is never cancelled by an epoch (only by closing).
        self._tasks[task] = self._epoch if fenced else UNFENCED
        task.add_done_callback(self._done)

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
        self._prepare("user", heard)

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
        self._prepare("user", heard)

    def _prepare(self, role: str, content: str) -> None:
        """A transcript or an answer of ours, which the session's next prompt will
        hold: its tokens are made ready before that request (chat_tokenizer.py).
        Soon, not now: the event just emitted is written to the session first."""
        # Stripped, as the session sends a message's text (session/items.py).
        if text := content.strip():
            asyncio.get_running_loop().call_soon(self._models.llm.prepare, role, text)

    def _prompt(self, req: pb.Generate, max_tokens: int, offered: Sequence[cpb.Tool] = ()) -> str:
        """Stage0's preamble, the client's instructions, and as much history as fits
        (with the `offered` functions in the prompt, or none: tools.py).

        Built on the event loop, not in a thread: with the history's pieces
        already encoded (chat_tokenizer.py) it costs ~0.4 ms for 20 turns, and
        the GIL lets a thread only slow it (bench/prompt_path.py: 128 sessions
        at once, the last prompt ready after 52 ms inline, 78 ms in threads)."""
        llm = self._models.llm
        s = self._settings
        messages = tools.pairs(req.messages)
        max_model_len = s.llm_max_model_len
        return history.fit_prompt(
            with_preamble(
                messages,
                preamble_for(s.llm_preamble, s.llm_style, functions_offered=bool(offered)),
                s.llm_reminder,
            ),
            tools.renderer(llm, offered),
            llm.count_tokens,
            max_model_len=max_model_len,
            # An answer longer than half the context ends at the context's end instead.
            reserve=min(max_tokens, max_model_len // 2),
            retention_ratio=req.retention_ratio,
        )

    async def _generate(self, req: pb.Generate, received: float) -> None:
        llm = self._models.llm
        max_tokens = req.max_output_tokens or self._settings.llm_max_output_tokens
        request_id = f"{self.session_id}:{req.response_id}"
        finish_reason = "stop"
        metrics = cpb.StageMetrics()
        # The spoken answer, which the next turn's prompt holds (tool calls render otherwise).
        spoken: list[str] = []
        called = False

        def prompt(offered: Sequence[cpb.Tool]) -> str:
            # Of the answer's last pass (tools.py), as the debug surface shows it.
            handed = bool(metrics.prompt)
            metrics.prompt = self._prompt(req, max_tokens, offered)
            if not handed:
                # The first pass's prompt goes to the engine now.
                self._metrics.generate_wait.observe(time.perf_counter() - received)
            return metrics.prompt

        try:
            with self._metrics.llm_batch_size.track_inprogress():
                async for out in tools.answer(
                    llm,
                    request_id,
                    req,
                    prompt,
                    temperature=req.temperature,
                    max_tokens=max_tokens,
                    check_threshold=self._settings.tool_check_threshold,
                ):
                    if isinstance(out, tools.ToolCallOut):
                        called = True
                        self._emit(
                            pb.Stage0Event(
                                tool_call=pb.GenerationToolCall(
                                    epoch=req.epoch,
                                    response_id=req.response_id,
                                    call=out.call,
                                    refused=out.refused,
                                )
                            )
                        )
                        continue
                    if out.text:
                        spoken.append(out.text)
                        self._emit(
                            pb.Stage0Event(
                                delta=pb.GenerationDelta(
                                    epoch=req.epoch, response_id=req.response_id, text=out.text
                                )
                            )
                        )
                    if out.finished:
                        finish_reason = out.finish_reason or "stop"
                        if out.metrics is not None:
                            self._record(metrics, out.metrics)
        except Exception as exc:
            code = "generation_failed"
            if isinstance(exc, history.HistoryTooLongError | PromptTooLongError):
                # This turn alone outgrows the context; the session goes on.
                code = "context_length_exceeded"
                log.warning("prompt too long: %s", exc, extra={"session_id": self.session_id})
            else:
                log.exception("generation failed", extra={"session_id": self.session_id})
            self._emit(
                pb.Stage0Event(
                    error=pb.StageError(
                        epoch=req.epoch,
                        response_id=req.response_id,
                        code=code,
                        message=str(exc),
                    )
                )
            )
            return
        self._metrics.generations.labels(finish_reason).inc()
        self._emit(
            pb.Stage0Event(
                done=pb.GenerationDone(
                    epoch=req.epoch,
                    response_id=req.response_id,
                    finish_reason=finish_reason,
                    metrics=metrics,
                )
            )
        )
        if not called:
            self._prepare("assistant", "".join(spoken))

    def _record(self, metrics: cpb.StageMetrics, m: GenerationMetrics) -> None:
        """One response's engine clocks: into its `response.done` metrics and Prometheus."""
        metrics.ttft_ms = m.ttft_ms
        metrics.tpot_ms = m.tpot_ms
        metrics.itl_ms.extend(m.itl_ms)
        metrics.num_prompt_tokens = m.num_prompt_tokens
        metrics.num_generation_tokens = m.num_generation_tokens
        self._metrics.ttft.observe(m.ttft_ms / 1000)
        self._metrics.tpot.observe(m.tpot_ms / 1000)
        for itl in m.itl_ms:
            self._metrics.itl.observe(itl / 1000)

    async def close(self) -> None:
        self._vad_batcher.discard(self._vad)
        self._turn_batcher.discard(self)
        self._drop_segmented()
        self._transcript.reset()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
