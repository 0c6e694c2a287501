"""What the stage workers send a session, routed to the part it is for.

Stage0's news about the user's input goes to listening, generation to the
response control, stage1's speech to the response control. Results of a
binding the session let go are dropped; a binding's end means its worker
died: what it owed ends with a typed reason and another worker takes over.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from antiphon.session import session_config
from antiphon.session.attachment import Attachment
from antiphon.session.journal import Emitter
from antiphon.session.listening import Listening
from antiphon.session.metrics import SessionMetrics
from antiphon.session.response_control import ResponseControl
from antiphon.session.stage_links import StageLinks
from antiphon.session.stages import Binding, StreamEnded
from antiphon.session.turns import Turns
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

log = logging.getLogger(__name__)

# Stage0 events fenced by the epoch: only generation. What stage0 heard (VAD
# events, utterances, transcripts) is the user's input, whatever happened to
# the reply: the speech that barged in is the next turn, even when its end
# was detected before stage0 saw the cancel.
GENERATION_EVENTS = ("delta", "tool_call", "done", "error")


class StageEvents:
    def __init__(
        self,
        *,
        session_id: str,
        config: Callable[[], cpb.SessionConfig],
        closed: Callable[[], bool],
        emitter: Emitter,
        links: StageLinks,
        attachment: Attachment,
        turns: Turns,
        listening: Listening,
        responses: ResponseControl,
        metrics: SessionMetrics,
        persist: Callable[[], Awaitable[None]],
    ) -> None:
        self._session_id = session_id
        self._config = config
        self._closed = closed
        self._emitter = emitter
        self._links = links
        self._attachment = attachment
        self._turns = turns
        self._listening = listening
        self._responses = responses
        self._metrics = metrics
        self._persist = persist

    async def retry_unbound(self) -> None:
        """Stages whose worker died with none to replace it: try again."""
        for stage, failed in list(self._links.unbound.items()):
            await self.replace_worker(stage, failed)

    async def handle(self, stage: str, result: Any) -> None:
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
        if self._attachment.detached and not self._turns.pending:
            # The turns it still owed are heard: its slot goes back now.
            await self.release("stage0")

    async def _stage0_event(self, ev: stage_pb2.Stage0Event) -> None:
        kind = ev.WhichOneof("kind")
        msg = getattr(ev, kind or "")
        if kind in GENERATION_EVENTS and msg.epoch != self._links.epoch:
            self._metrics.stale_dropped.labels("stage0").inc()
            return
        server_vad = session_config.lane(self._config()) == stage_pb2.LANE_SERVER_VAD
        match kind:
            case "speech_started":
                await self._listening.speech_started(msg, server_vad=server_vad)
            case "speech_stopped" if server_vad:
                await self._listening.speech_stopped(msg)
            case "transcript":
                await self._listening.transcript(msg)
            case "utterance":
                await self._listening.utterance(msg)
            case "unit_decision":
                if msg.decision == stage_pb2.DECISION_LISTEN:
                    await self._responses.listen("model_listen")
            case "delta":
                await self._responses.on_delta(msg)
            case "tool_call":
                await self._responses.on_tool_call(msg)
            case "done":
                await self._responses.on_generation_done(msg)
            case "error":
                await self._stage_error("stage0", msg)
            case "frame":
                await self._responses.on_model_frame(msg)

    async def _stage1_event(self, ev: stage_pb2.Stage1Event) -> None:
        kind = ev.WhichOneof("kind")
        msg = getattr(ev, kind or "")
        if msg.epoch != self._links.epoch:
            self._metrics.stale_dropped.labels("stage1").inc()
            return
        match kind:
            case "audio":
                await self._responses.on_audio(msg)
            case "done":
                await self._responses.on_speech_done(msg)
            case "error":
                await self._stage_error("stage1", msg)

    async def _stage_error(self, stage: str, msg: stage_pb2.StageError) -> None:
        code = msg.code or f"{stage}_error"
        await self._emitter.error(
            spb.ErrorEvent(type="server_error", code=code, message=msg.message)
        )
        await self._responses.fail(code, msg.response_id)

    async def _stage_lost(self, stage: str, binding: Binding[Any]) -> None:
        """A stage worker died: end what it owed, and carry on with another."""
        if self._closed() or not self._links.is_current(stage, binding):
            return  # a binding we closed or already replaced
        log.warning("stage stream lost", extra={"session_id": self._session_id, "stage": stage})
        self._metrics.stage_failovers.labels(stage).inc()
        if stage == "stage0":
            # Transcripts it owed will not come: those turns end here.
            self._turns.pending.clear()
        # Never left open: a typed reason, and the next turn works.
        await self._responses.fail(f"{stage}_unavailable")
        if self._attachment.detached:
            # Nobody to serve: a resume binds a worker again.
            await self.release(stage)
            return
        await self.replace_worker(stage, binding.address)
        if stage == "stage0" and self._links.model_native:
            # A model-native model's memory of the call (its KV cache) died
            # with the worker: the client is told the model starts afresh.
            await self._emitter.error(
                spb.ErrorEvent(
                    type="server_error",
                    code="model_context_reset",
                    message="the model's worker was lost; the conversation goes on "
                    "with a fresh model context (it no longer remembers the call so far)",
                )
            )

    async def replace_worker(self, stage: str, failed: str) -> None:
        try:
            await self._links.replace(stage, failed)
        except Exception as exc:
            # Tried again at every tick until a worker of the stage is back.
            await self._emitter.error(
                spb.ErrorEvent(
                    type="server_error",
                    code="stage_unavailable",
                    message=f"no {stage} worker is available: {exc}",
                )
            )
            return
        await self._persist()

    async def release(self, stage: str) -> None:
        if await self._links.release(stage):
            await self._persist()
