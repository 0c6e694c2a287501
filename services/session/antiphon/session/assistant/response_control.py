"""The assistant's side: one response at a time, from start to its last event.

A response starts (or waits, deferred, behind the active one), asks stage0
for text once every turn before it is heard, streams text to stage1 for
speech, and ends completed, cancelled or failed. Cancelling advances the
epoch first, so nothing the stages still send for it is accepted. Speech
over an answer is decided by the overlap policy.

At the user's first pause the answer may already be asked for, held out of
sight (preemption.py); a response whose request is that one takes it over.

A model-native backend (the Moshi architecture) is asked nothing: it hears
all the time and talks when it decides. Its speech, frame by frame, opens a
response (the one `response.create` made, or a new one) and its going quiet
ends it; every frame's audio tokens go to stage1, which decodes them.
"""

from __future__ import annotations

from antiphon.common.ids import new_id
from antiphon.session.actor.errors import invalid
from antiphon.session.actor.journal import Emitter
from antiphon.session.assistant.playback import Playback
from antiphon.session.assistant.preemption import Held, Preemption
from antiphon.session.assistant.responses import (
    ActiveResponse,
    ResponseOptions,
    ResponseState,
    item_status,
)
from antiphon.session.config import policy, session_config
from antiphon.session.config.current_config import CurrentConfig
from antiphon.session.conversation.conversation import Conversation
from antiphon.session.metrics import SessionMetrics
from antiphon.session.stage.stage_links import StageLinks
from antiphon.session.user.turns import Turns
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

# Frames a model-native session may hold while its last response's audio is
# still being decoded (stage1 answers within a step; this bounds a stuck one).
MAX_HELD_FRAMES = 64


class ResponseControl:
    """The only writer of the active response, the one deferred behind it,
    and the playback ledgers of the responses that ended."""

    def __init__(
        self,
        *,
        config: CurrentConfig,
        emitter: Emitter,
        links: StageLinks,
        turns: Turns,
        conversation: Conversation,
        metrics: SessionMetrics,
        preemption: Preemption,
    ) -> None:
        self._config = config
        self._preemption = preemption
        self._emitter = emitter
        self._links = links
        self._turns = turns
        self._conversation = conversation
        self._metrics = metrics
        self._active: ResponseState | None = None
        self._deferred: ResponseOptions | None = None
        # What the client played of recent answers, for acks and truncations
        # that come after their `response.done`.
        self._playback = Playback(conversation)
        # The reply a client's truncate stopped, until its own cancel arrives.
        self._stopped_by_truncate = ""
        # A model-native session's frames that came while the response before
        # was still being decoded: they start the next one once it is done.
        self._held_frames: list[stage_pb2.ModelFrame] = []

    @property
    def active(self) -> ActiveResponse | None:
        r = self._active
        return ActiveResponse(r.id, r.item_id) if r is not None else None

    def orphan_record(self) -> spb.Response | None:
        """What a successor needs of the response in flight: enough to end it,
        none of its progress, so streaming it changes nothing in the snapshot."""
        if self._active is None:
            return None
        record = self._active.response("in_progress")
        record.ClearField("playback")
        return record

    # ------------------------------------------------------------ start
    async def auto_start(self, *, eager: bool = True) -> None:
        """A turn was sealed: answer it, if the session answers by itself."""
        if self._config.auto_response:
            await self.start(self._config.default_options(), eager=eager)

    async def create(self, req: spb.CreateResponse) -> None:
        """`response.create`."""
        if self._active is not None:
            raise invalid(
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress: {self._active.id}.",
            )
        await self.start(self._config.requested_options(req), eager=True)

    async def start(self, opts: ResponseOptions, *, eager: bool) -> None:
        if self._active is not None:
            self._deferred = opts
            return
        rid = new_id("resp")
        self._active = ResponseState(
            id=rid,
            item_id=f"item_{rid}",
            session_id=self._config.session_id,
            epoch=self._links.epoch,
            turn_id=self._turns.turn_id,
            previous_item_id=self._turns.last_item_id,
            options=opts,
        )
        self._turns.item_added(self._active.item_id)
        if eager:
            await self._emitter.emit_all(self._active.created_events())
        if self._links.model_native:
            # Nothing to ask: it answers with the model's next speech.
            self._active.generation_requested = True
        elif not self._turns.pending:
            await self._generate(self._active)

    async def heard_all(self) -> None:
        """The turns it waited for are heard: generate now, if it was waiting."""
        r = self._active
        if not self._turns.pending and r is not None and not r.generation_requested:
            await self._generate(r)

    async def _generate(self, r: ResponseState) -> None:
        """Ask stage0 for the answer, prompting with the committed history (or
        take over the preemptive answer, when it was asked the same)."""
        r.generation_requested = True
        request = await self._request(r.options)
        taken = self._preemption.take(request, speak=r.audio)
        if taken is None:
            request.response_id = r.id
            self._links.generate(request)
            return
        r.stage_id, held = taken
        for msg in held:
            await self._replay(msg)

    async def _request(self, opts: ResponseOptions, *, user: str = "") -> stage_pb2.Generate:
        history = await self._conversation.items()
        return opts.request(history, session_config.retention_ratio(self._config.now), user)

    async def _replay(self, msg: Held) -> None:
        """What the stages sent of a preemptive answer, delivered as its response's own."""
        if isinstance(msg, stage_pb2.GenerationDelta):
            await self.on_delta(msg, spoken=True)
        elif isinstance(msg, stage_pb2.GenerationToolCall):
            await self.on_tool_call(msg)
        elif isinstance(msg, stage_pb2.GenerationDone):
            await self.on_generation_done(msg)
        elif isinstance(msg, stage_pb2.AudioChunk):
            await self.on_audio(msg)
        elif isinstance(msg, stage_pb2.SynthesisDone):
            await self.on_speech_done(msg)

    # ------------------------------------------------------- preemption
    async def preempt(self, transcript: str) -> None:
        """The user paused with `transcript` said: ask for the answer the turn's
        end would ask for, if the session answers by itself and nothing else is
        under way (a reply, or a turn still to hear)."""
        text = transcript.strip()
        if (
            not text
            or not self._config.auto_response
            or self._active is not None
            or self._deferred is not None
            or self._turns.pending
            or self._links.model_native
        ):
            self._preemption.refuse()
            return
        opts = self._config.default_options()
        self._preemption.start(await self._request(opts, user=text), speak=opts.audio)

    def hold(self, msg: Held) -> bool:
        """Whether a stage result is the preemptive answer's (held, not delivered)."""
        return self._preemption.hold(msg)

    def drop_preemption(self, reason: str) -> None:
        self._preemption.drop(reason)

    # ----------------------------------------------------------- cancel
    async def cancel(self, wanted: str) -> None:
        """`response.cancel` (of `wanted`, or of whatever is active)."""
        r = self._active
        if r is None and self._stopped_by_truncate and wanted in ("", self._stopped_by_truncate):
            # The cancel that follows a truncate of the reply being said (the
            # OpenAI SDKs send both): the truncate already stopped it.
            self._stopped_by_truncate = ""
            return
        if r is None or (wanted and wanted != r.id):
            raise invalid(
                "response_cancel_not_active", "Cancellation failed: no active response found."
            )
        await self.cancel_active("client_cancelled")

    async def stop_for_truncate(self, item_id: str) -> None:
        """A truncate of what is still being said: it stops first."""
        r = self._active
        if r is not None and r.item_id == item_id:
            self._stopped_by_truncate = r.id
            await self.cancel_active("client_cancelled")

    async def cancel_active(self, reason: str) -> None:
        """Advance the epoch so no stale output of the old one is accepted, then end it."""
        r = self._active
        self._preemption.drop("cancelled")
        self._links.advance_epoch()
        if r is not None:
            await self.finish(r, "cancelled", reason)

    async def clear_output_audio(self) -> None:
        """`output_audio_buffer.clear`: the reply being played stops."""
        r = self._active
        if r is not None:
            await self.cancel_active("output_audio_cleared")
        await self._emitter.emit(
            "output_audio_cleared", spb.OutputAudioCleared(response_id=r.id if r else "")
        )

    def drop_deferred(self) -> None:
        self._deferred = None

    # ----------------------------------------------------------- finish
    async def finish(self, r: ResponseState, status: str, reason: str = "") -> None:
        config = self._config.now
        r.settle(status)
        if not r.created:
            await self._emitter.emit_all(r.created_events())
        # History first, then the events: a client that reads the conversation
        # on `response.done` (or a replica that takes over after it was
        # journaled) finds the answer there.
        spoke = bool(r.transcript if r.audio else r.text)
        if (
            r.opened
            and config.playback_commit_policy == "commit_all_on_done"
            and (status == "completed" or (status == "cancelled" and spoke))
        ):
            # Everything sent counts as said; a later truncation cuts it to what was heard.
            await self._conversation.place(r.item(item_status(status)), r.ledger.previous_item_id)
            r.ledger.stored()
        await self._store_calls(r)
        await self._emitter.emit_all(
            r.terminal_events(status, reason, with_metrics=config.return_stage_metrics)
        )
        self._playback.ended(r.ledger)
        self._metrics.responses.labels(status).inc()
        self._active = None
        if self._deferred is not None:
            opts, self._deferred = self._deferred, None
            await self.start(opts, eager=True)
        if r.model_quiet:
            await self.listen("model_listen")
        held, self._held_frames = self._held_frames, []
        for frame in held:
            await self.on_model_frame(frame)

    async def _store_calls(self, r: ResponseState) -> None:
        """The calls a response made go into history after its message: the
        next prompt holds them, and their outputs answer them."""
        previous = r.item_id if r.ledger.in_history else r.previous_item_id
        for call in r.calls:
            await self._conversation.place(call, previous)
            previous = call.id
        if r.calls or not r.opened:
            # The last item is its last call, or (no message, no call) the turn it answered.
            self._turns.response_ended(r.item_id, r.calls[-1].id if r.calls else r.previous_item_id)

    async def fail(self, code: str, response_id: str = "") -> None:
        """A stage failed (for `response_id`, or for whatever is active)."""
        r = self._active
        if r is not None and (not response_id or response_id == r.stage_id):
            await self.finish(r, "failed", code)

    # ---------------------------------------------------------- playback
    async def truncate(self, item_id: str, audio_end_ms: int) -> str:
        """A truncate of an answer's audio at `audio_end_ms`: what is still being
        said stops first, and history keeps the words heard by then (returned)."""
        await self.stop_for_truncate(item_id)
        return await self._playback.truncate(item_id, audio_end_ms)

    async def acknowledge(self, ack: spb.PlaybackAck) -> spb.PlaybackAcknowledged:
        """`output_audio.playback_ack`: what the client played of an answer."""
        r = self._active
        active = r.ledger if r is not None and ack.response_id in ("", r.id) else None
        ack_only = self._config.now.playback_commit_policy == "ack_only"
        ledger = await self._playback.acknowledge(ack, active, ack_only=ack_only)
        return spb.PlaybackAcknowledged(
            session_id=self._config.session_id,
            epoch=self._links.epoch,
            response_id=ledger.response_id,
            item_id=ledger.item_id,
            played_ms=ledger.played_ms,
            committed_ms=ledger.committed_ms,
            truncate=ack.truncate,
            playback=ledger.playback(),
            history_committed=ledger.in_history,
        )

    # ---------------------------------------------------- stage results
    def current(self, response_id: str) -> ResponseState | None:
        r = self._active
        if r is None or r.stage_id != response_id:
            self._metrics.stale_dropped.labels("response").inc()
            return None
        return r

    async def on_delta(self, msg: stage_pb2.GenerationDelta, *, spoken: bool = False) -> None:
        """Text of the answer; `spoken`: it went to stage1 already (a preemptive answer's)."""
        r = self.current(msg.response_id)
        if r is None or not msg.text:
            return
        if not r.created:
            await self._emitter.emit_all(r.created_events())
        if not r.opened:
            await self._emitter.emit_all(r.message_events())
        if r.audio:
            r.text += msg.text
            if not spoken:
                self._links.synthesize(r.stage_id, msg.text)
        else:
            await self._emitter.emit_all(r.text_events(msg.text))

    async def on_generation_done(self, msg: stage_pb2.GenerationDone) -> None:
        r = self.current(msg.response_id)
        if r is None:
            return
        r.generation_done = True
        # Stage0's numbers, keeping stage1's if its done came first.
        first_audio_ms = r.metrics.stage1_first_audio_ms
        r.metrics.CopyFrom(msg.metrics)
        r.metrics.stage1_first_audio_ms = first_audio_ms
        if not r.created and not r.text and not r.calls:
            # Nothing visible: the model chose to stay silent.
            self._active = None
            await self.listen("model_listen")
            return
        if r.audio and r.opened:
            self._links.synthesize(r.stage_id, final=True)
        else:
            # Nothing to say (only calls, or text): done now.
            await self.finish(r, "completed")

    async def on_tool_call(self, msg: stage_pb2.GenerationToolCall) -> None:
        """The model called a function: an output item of the response, sent as it ends.
        What names no function the response declares is no call (the reference's
        raw fallback tells a duplex client what it was). A model-native model
        calls between its frames: the call is the answer it is in (or starts
        one, if it called before saying anything)."""
        if self._links.model_native and not msg.response_id:
            if msg.epoch != self._links.epoch:
                return  # a call of before a cancel the model had not yet heard
            if self._active is None:
                await self.start(self._config.default_options(), eager=True)
            msg.response_id = self._active.id if self._active is not None else ""
        r = self.current(msg.response_id)
        if r is None:
            return
        declared = {t.name for t in r.options.tools} if r.options.may_call else set()
        if msg.refused or msg.call.name not in declared:
            await self._emitter.emit(
                "function_call_malformed",
                spb.MalformedFunctionCall(
                    session_id=self._config.session_id,
                    epoch=self._links.epoch,
                    response_id=r.id,
                    name=msg.call.name,
                    arguments=msg.call.arguments,
                ),
            )
            return
        r.add_call(msg.call)

    async def on_audio(self, msg: stage_pb2.AudioChunk) -> None:
        r = self.current(msg.response_id)
        if r is not None:
            await self._emitter.emit_all(
                r.audio_events(
                    msg.pcm16,
                    msg.sample_rate_hz,
                    msg.text,
                    msg.duration_ms,
                    list(msg.marks),
                    self._config.now.output_audio_format,
                )
            )

    async def on_speech_done(self, msg: stage_pb2.SynthesisDone) -> None:
        r = self.current(msg.response_id)
        if r is not None:
            r.metrics.stage1_first_audio_ms = msg.first_audio_ms
            if r.generation_done:
                await self.finish(r, "completed")

    # ------------------------------------------------ model-native speech
    async def on_model_frame(self, frame: stage_pb2.ModelFrame) -> None:
        """One frame of a model that decides itself when to talk."""
        r = self._active
        if r is not None and r.model_quiet:
            # Its last frames' audio is still being decoded: this frame waits.
            if len(self._held_frames) < MAX_HELD_FRAMES:
                self._held_frames.append(frame)
                return
            await self.fail("stage1_timeout", r.id)
            r = self._active
        talking = frame.decision == stage_pb2.DECISION_SPEAK and frame.epoch == self._links.epoch
        if not talking:
            if r is not None and (r.model_spoke or r.calls):
                await self._model_went_quiet(r)
            self._links.decode(frame, "")
            return
        if r is None:
            await self.start(self._config.default_options(), eager=True)
            r = self._active
            assert r is not None
        if not r.created:
            await self._emitter.emit_all(r.created_events())
        if not r.opened:
            await self._emitter.emit_all(r.message_events())
        r.model_spoke = True
        if r.audio:
            self._links.decode(frame, r.stage_id)
        else:
            # A text-only response: the model's words, and its audio decoded for nobody.
            self._links.decode(frame, "")
            if frame.text:
                await self._emitter.emit_all(r.text_events(frame.text))
        if frame.turn_ended:
            # Its turn is over with this frame, whatever it does next.
            await self._model_went_quiet(r)

    async def _model_went_quiet(self, r: ResponseState) -> None:
        """The response ends once stage1 has decoded the frames sent before this."""
        r.generation_done = True
        r.model_quiet = True
        if r.audio and r.opened:
            self._links.synthesize(r.stage_id, final=True)
        else:
            # Nothing spoken (only calls, or text): done now.
            await self.finish(r, "completed")

    # ---------------------------------------------------------- overlap
    async def listen(self, reason: str) -> None:
        await self._emitter.emit(
            "response_listen",
            spb.Listen(session_id=self._config.session_id, epoch=self._links.epoch, reason=reason),
        )

    async def overlap(self, action: str, reason: str, overlap_ms: int = 0) -> None:
        listen = action == "listen"
        await self._emitter.emit(
            "overlap_decision",
            spb.OverlapDecision(
                session_id=self._config.session_id,
                epoch=self._links.epoch,
                policy=policy.overlap_policy(self._config.now),
                action=action,
                reason=reason,
                overlap_ms=overlap_ms,
                buffer_audio=listen,
                defer_runtime_append=listen,
                force_listen=listen,
            ),
        )

    async def speech_over_response(self) -> None:
        """The user started speaking: if the assistant is answering, the overlap policy decides.
        A preemptive answer still held is of an utterance before this one."""
        self._preemption.drop("speech_started")
        if self._active is None:
            return
        config = self._config.now
        if policy.overlap_policy(config) == policy.BARGE_IN:
            await self.overlap("barge_in", "server_vad_utterance_active")
            await self.cancel_active("barge_in")
        elif session_config.lane(config) != stage_pb2.LANE_MANUAL:
            # The answer goes on; what the user says is kept for the turn's end.
            await self.overlap("listen", "overlap_speech")

    async def barge_in(self, source: str) -> None:
        """The client's own VAD heard the user over the assistant."""
        await self.overlap("barge_in", f"client_{source or 'signal'}")
        if self._active is not None:
            await self.cancel_active("barge_in")

    def is_short_overlap(self, speech_ms: int, short_ms: int) -> bool:
        """A remark this short over an auto-response ("mm-hm") is no turn."""
        return self._active is not None and self._config.auto_response and speech_ms < short_ms
