"""The user's input, from the first append to a sealed turn.

Audio goes to stage0 as it comes; a commit (the client's, or server VAD's
at the end of speech) seals it into a user item, unless it was only a short
remark over the answer. Stage0's news about the input (speech started and
stopped, a transcript, a native-lane utterance) lands here too, and sealed
turns start responses through the response control.
"""

from __future__ import annotations

from antiphon.session.actor import errors
from antiphon.session.actor.errors import Rejection
from antiphon.session.actor.journal import Emitter
from antiphon.session.assistant.response_control import ResponseControl
from antiphon.session.config.current_config import CurrentConfig
from antiphon.session.conversation.conversation import Conversation
from antiphon.session.settings import SessionSettings
from antiphon.session.stage.stage_links import StageLinks
from antiphon.session.user.input_buffer import InputBuffer, to_stage0
from antiphon.session.user.turns import Turns
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2


class Listening:
    """The only writer of the input buffer; seals turns through `Turns`."""

    def __init__(
        self,
        *,
        config: CurrentConfig,
        settings: SessionSettings,
        emitter: Emitter,
        links: StageLinks,
        turns: Turns,
        responses: ResponseControl,
        conversation: Conversation,
    ) -> None:
        self._config = config
        self._settings = settings
        self._emitter = emitter
        self._links = links
        self._input = InputBuffer(settings.max_pending_input_bytes_per_session)
        self._turns = turns
        self._responses = responses
        self._conversation = conversation

    @property
    def owes_transcripts(self) -> bool:
        """Stage0 still owes the transcript of a sealed turn."""
        return self._turns.pending > 0

    def stage0_lost(self) -> None:
        """Stage0's worker died: the turns whose transcript it owed end unheard."""
        self._turns.transcripts_lost()

    # ---------------------------------------------------------- commands
    def append(self, audio: spb.AppendAudio) -> None:
        rate = audio.sample_rate_hz or self._config.now.input_audio_format.sample_rate_hz
        pcm16 = self._input.accept(
            audio.pcm16, rate, self._links.input_rate, bounded=not self._links.model_native
        )
        if self._links.capabilities.consumes_video_frames:
            self._links.audio(pcm16, audio.video_frames, audio.max_slice_nums)
        else:
            self._links.audio(pcm16)  # the frames checked at the edge, and dropped

    def append_text(self, text: str) -> None:
        """`input.text.append`: text that joins the next commit's turn."""
        self._turns.text_appended(text)

    async def hear_created(
        self, item: cpb.Item, audio: bytes, rate: int, after: str | None
    ) -> None:
        """A created audio item with no transcript: stage0 hears it like a
        commit, and it is stored where it was asked to go once heard. Refused
        while the user's own input is uncommitted (the two would mix)."""
        if not self._input.empty:
            raise errors.invalid(
                "input_audio_buffer_not_empty",
                "commit or clear the input audio buffer before creating an audio item",
                "item.content",
            )
        if after:
            await self._conversation.get(after)  # ItemNotFound before anything changes
        rate = rate or self._config.now.input_audio_format.sample_rate_hz
        self._links.audio(to_stage0(audio, rate, self._links.input_rate))
        self._turns.expect_created(item, after)
        self._links.commit(item.id)

    async def commit(self, commit: spb.CommitInput) -> None:
        if commit.HasField("is_speech") and not commit.is_speech:
            # A declared silence: no user item, the model keeps listening.
            self._links.clear_input()
            self._input.clear()
            await self._emitter.emit(
                "input_committed", self._turns.committed_without_item(self._links.epoch)
            )
            await self._responses.listen("silence_commit")
            return
        limit = self._settings.max_pending_turns_per_session
        if self._turns.pending >= limit:
            raise Rejection(
                "rate_limit_error",
                "too_many_pending_turns",
                f"max_pending_turns_per_session ({limit}) turns are still being processed",
            )
        if self._input.empty and self._turns.has_text:
            await self._commit_text()
            return
        if self._input.empty:
            raise errors.invalid(
                "input_audio_buffer_empty",
                "input_audio_buffer.commit requires a non-empty input audio buffer.",
            )
        if await self._acknowledged_overlap(self._input.pending_ms):
            return
        # The resampler's filter still holds the last few ms of the turn.
        tail = self._input.flush()
        if tail:
            self._links.audio(tail)
        await self._commit_audio()

    async def clear(self) -> None:
        """`input_audio_buffer.clear`."""
        self._clear()
        await self._emitter.emit("input_cleared", spb.InputCleared())

    async def cancel(self) -> None:
        """`input.cancel`: a new epoch; the input and any response of the old one end."""
        if self._responses.active is not None:
            await self._responses.cancel_active("input_cancelled")
        else:
            self._links.advance_epoch()
        self._clear()
        # Projected as `input_audio_buffer.cleared` (with the native event inside).
        await self._emitter.emit(
            "input_cancelled",
            spb.InputCancelled(session_id=self._config.session_id, epoch=self._links.epoch),
        )

    async def let_go(self) -> None:
        """Detached: the uncommitted input goes. It lives on stage0; journaled,
        so the resumed client learns that its unfinished turn is gone."""
        self._responses.drop_preemption("closed")
        if not self._input.empty:
            self._links.clear_input()
            await self._emitter.emit("input_cleared", spb.InputCleared())
        self._input.reset()
        self._turns.forget_speech()

    # ------------------------------------------------------ stage0 news
    async def speech_started(self, msg: stage_pb2.VadSpeechStarted, *, server_vad: bool) -> None:
        # Every lane names the item the speech may become (its partial
        # transcripts address it); server VAD announces it.
        started = self._turns.speech_started(msg.audio_start_ms)
        if server_vad:
            await self._emitter.emit_all([started])
        await self._responses.speech_over_response()

    async def partial_transcript(self, msg: stage_pb2.TranscriptPartial) -> None:
        delta = self._turns.partial(msg.text)
        if delta is not None:
            await self._emitter.emit_all([delta])

    async def speech_stopped(self, msg: stage_pb2.VadSpeechStopped) -> None:
        """Server VAD: the end of speech commits the turn."""
        item_id, speech_ms, stopped = self._turns.speech_stopped(
            msg, self._config.now.turn_detection
        )
        await self._emitter.emit_all([stopped])
        if not self._input.empty and not await self._acknowledged_overlap(speech_ms, item_id):
            await self._commit_audio(item_id)

    async def transcript(self, msg: stage_pb2.Transcript) -> None:
        heard = self._turns.heard(msg.item_id, msg.text)
        if heard is not None:
            if heard.created:
                await self._conversation.place(heard.item, heard.insert_after)
            else:
                await self._conversation.append(heard.item)
            await self._emitter.emit_all(heard.events)
        await self._responses.heard_all()

    def utterance_ended(self, msg: stage_pb2.VadSpeechStopped) -> None:
        """Native lane: the VAD ended an utterance; its transcript follows."""
        self._turns.utterance_ended(msg.audio_end_ms)

    async def utterance(self, msg: stage_pb2.Utterance) -> None:
        """Native lane: the model heard a whole utterance and decided."""
        self._input.clear()
        item_id = self._turns.utterance_item_id(msg.audio_end_ms)
        if msg.decision != stage_pb2.DECISION_SPEAK or not msg.transcript.strip():
            await self._responses.listen("model_listen")
            return
        deferred = self._responses.active is not None
        item, events = self._turns.seal_utterance(
            item_id, msg.transcript, self._links.epoch, deferred=deferred
        )
        await self._conversation.append(item)
        await self._emitter.emit_all(events)
        if self._config.now.auto_response:
            await self._responses.start(self._config.default_options(), eager=False)

    # ------------------------------------------------------------ inside
    async def _acknowledged_overlap(self, speech_ms: int, item_id: str = "") -> bool:
        """A short remark over an auto-response ("mm-hm"): acknowledged, not a turn."""
        if not self._responses.is_short_overlap(speech_ms, self._settings.short_overlap_ms):
            return False
        self._clear()
        await self._emitter.emit(
            "input_committed", self._turns.committed_without_item(self._links.epoch, item_id)
        )
        await self._responses.overlap("drop", "short_overlap", speech_ms)
        return True

    async def _commit_text(self) -> None:
        """A turn of `input.text.append` text only: the user item exists at once."""
        deferred = self._responses.active is not None
        item, events = self._turns.seal_text(self._links.epoch, deferred=deferred)
        await self._conversation.append(item)
        await self._emitter.emit_all(events)
        await self._responses.auto_start()

    async def _commit_audio(self, item_id: str = "") -> None:
        """Seal the buffered audio into a user item; its transcript follows from stage0."""
        deferred = self._responses.active is not None
        self._input.clear()
        events = self._turns.seal_audio(item_id, self._links.epoch, deferred=deferred)
        self._links.commit(self._turns.last_item_id)
        await self._emitter.emit_all(events)
        await self._responses.auto_start()

    def _clear(self) -> None:
        self._responses.drop_preemption("input_cleared")
        self._links.clear_input()
        self._input.clear()
        self._turns.input_cleared()
