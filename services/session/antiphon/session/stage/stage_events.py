"""What the stage workers send a session, routed to the part it is for.

Stage0's news about the user's input goes to listening, generation to the
response control, stage1's speech to the response control, what the model
took into its context to the model context, and a delegate LLM's answer to
the delegate. Each event's
message type finds its handler (`Routes`); results of a binding the
session let go are dropped; a binding's end means its worker died: what it
owed ends with a typed reason and another worker takes over.
"""

from __future__ import annotations

import logging
from typing import Any

from antiphon.session.actor.journal import Emitter
from antiphon.session.assistant import delegate as delegation
from antiphon.session.assistant.delegate import Delegate
from antiphon.session.assistant.model_context import ModelContext
from antiphon.session.assistant.response_control import ResponseControl
from antiphon.session.config.current_config import CurrentConfig
from antiphon.session.metrics import SessionMetrics
from antiphon.session.stage.oneof_routes import Routes
from antiphon.session.stage.stage_links import StageLinks
from antiphon.session.stage.stage_workers import StageWorkers
from antiphon.session.stage.stages import Binding, StreamEnded
from antiphon.session.user.listening import Listening
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

log = logging.getLogger(__name__)

# Stage0 events fenced by the epoch: only generation. What stage0 heard (VAD
# events, utterances, transcripts) is the user's input, whatever happened to
# the reply: the speech that barged in is the next turn, even when its end
# was detected before stage0 saw the cancel.
GENERATION_EVENTS = (
    stage_pb2.GenerationDelta,
    stage_pb2.GenerationToolCall,
    stage_pb2.GenerationDone,
    stage_pb2.StageError,
)
# Every stage1 event is fenced: it is all speech of some response.
SPEECH_EVENTS = (stage_pb2.AudioChunk, stage_pb2.SynthesisDone, stage_pb2.StageError)


class StageEvents:
    def __init__(
        self,
        *,
        config: CurrentConfig,
        links: StageLinks,
        listening: Listening,
        responses: ResponseControl,
        context: ModelContext,
        delegate: Delegate,
        workers: StageWorkers,
        emitter: Emitter,
        metrics: SessionMetrics,
    ) -> None:
        self._config = config
        self._links = links
        self._listening = listening
        self._responses = responses
        self._context = context
        self._delegate = delegate
        self._workers = workers
        self._emitter = emitter
        self._metrics = metrics
        self.stage0 = (
            Routes(stage_pb2.Stage0Event)
            .route(stage_pb2.VadSpeechStarted, self._speech_started)
            .route(stage_pb2.VadSpeechStopped, self._speech_stopped)
            .route(stage_pb2.Transcript, listening.transcript)
            .route(stage_pb2.TranscriptPartial, listening.partial_transcript)
            .route(stage_pb2.Utterance, listening.utterance)
            .route(stage_pb2.UnitDecision, self._unit_decision)
            .route(stage_pb2.GenerationDelta, responses.on_delta)
            .route(stage_pb2.GenerationToolCall, responses.on_tool_call)
            .route(stage_pb2.GenerationDone, responses.on_generation_done)
            .route(stage_pb2.StageError, self._stage0_error)
            .route(stage_pb2.ModelFrame, responses.on_model_frame)
            .route(stage_pb2.UtterancePause, self._pause)
            .route(stage_pb2.SpeechResumed, self._resumed)
            .route(stage_pb2.ContextTaken, context.on_taken)
        )
        self.stage1 = (
            Routes(stage_pb2.Stage1Event)
            .route(stage_pb2.AudioChunk, responses.on_audio)
            .route(stage_pb2.SynthesisDone, responses.on_speech_done)
            .route(stage_pb2.StageError, self._stage1_error)
        )

    async def handle(self, stage: str, result: Any) -> None:
        if stage == delegation.STAGE:
            await self._delegate.handle(result)
            return
        if isinstance(result, StreamEnded):
            await self._stage_lost(stage, result.binding)
            return
        if not self._links.is_current(stage, result.binding):
            # From a binding this session let go (released at detach, or
            # replaced): what it still had in flight is for nobody.
            self._metrics.stale_dropped.labels(stage).inc()
            return
        if stage == "stage1":
            await self._stage1_event(result.event)
            return
        await self._stage0_event(result.event)
        if not self._listening.owes_transcripts:
            # The turns it still owed are heard: a detached session's slot goes back now.
            await self._workers.release_if_detached("stage0")

    async def _stage0_event(self, ev: stage_pb2.Stage0Event) -> None:
        msg = self.stage0.message(ev)
        if msg is None:
            return
        if isinstance(msg, GENERATION_EVENTS):
            if msg.epoch != self._links.epoch:
                self._metrics.stale_dropped.labels("stage0").inc()
                return
            if self._responses.hold(msg):
                return
        await self.stage0.dispatch(msg)

    async def _stage1_event(self, ev: stage_pb2.Stage1Event) -> None:
        msg = self.stage1.message(ev)
        if msg is None:
            return
        if isinstance(msg, SPEECH_EVENTS):
            if msg.epoch != self._links.epoch:
                self._metrics.stale_dropped.labels("stage1").inc()
                return
            if self._responses.hold(msg):
                return
        await self.stage1.dispatch(msg)

    # ------------------------------------------------------- stage0 news
    @property
    def _server_vad(self) -> bool:
        return self._config.lane == stage_pb2.LANE_SERVER_VAD

    async def _speech_started(self, msg: stage_pb2.VadSpeechStarted) -> None:
        await self._listening.speech_started(msg, server_vad=self._server_vad)

    async def _speech_stopped(self, msg: stage_pb2.VadSpeechStopped) -> None:
        # Only server VAD ends a turn by itself; in other lanes the VAD only
        # tells of speech over an answer.
        if self._server_vad:
            await self._listening.speech_stopped(msg)
        elif self._config.lane == stage_pb2.LANE_NATIVE:
            self._listening.utterance_ended(msg)

    async def _pause(self, msg: stage_pb2.UtterancePause) -> None:
        """The user paused: the answer to what they said so far is asked for, held."""
        await self._responses.preempt(msg.transcript)

    async def _resumed(self, _msg: stage_pb2.SpeechResumed) -> None:
        self._responses.drop_preemption("speech_resumed")

    async def _unit_decision(self, msg: stage_pb2.UnitDecision) -> None:
        if msg.decision == stage_pb2.DECISION_LISTEN:
            await self._responses.listen("model_listen")

    async def _stage0_error(self, msg: stage_pb2.StageError) -> None:
        if self._context.owns(msg.response_id):
            await self._context.on_error(msg)
            return
        await self._stage_error("stage0", msg)

    async def _stage1_error(self, msg: stage_pb2.StageError) -> None:
        await self._stage_error("stage1", msg)

    async def _stage_error(self, stage: str, msg: stage_pb2.StageError) -> None:
        code = msg.code or f"{stage}_error"
        await self._emitter.error(
            spb.ErrorEvent(type="server_error", code=code, message=msg.message)
        )
        await self._responses.fail(code, msg.response_id)

    # ------------------------------------------------------- fail-over
    async def _stage_lost(self, stage: str, binding: Binding[Any]) -> None:
        """A stage worker died: end what it owed, and carry on with another."""
        if not self._links.is_current(stage, binding):
            return  # a binding we closed or already replaced
        log.warning(
            "stage stream lost", extra={"session_id": self._config.session_id, "stage": stage}
        )
        self._metrics.stage_failovers.labels(stage).inc()
        self._responses.drop_preemption("worker_lost")
        if stage == "stage0":
            # Transcripts it owed will not come: those turns end here; nor
            # will the model take what waited for its context.
            self._listening.stage0_lost()
            self._context.forget()
        # Never left open: a typed reason, and the next turn works.
        await self._responses.fail(f"{stage}_unavailable")
        await self._workers.replace_lost(stage, binding.address)
