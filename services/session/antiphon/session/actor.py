"""The session actor: one per session, one mailbox, one writer of its events.

Client commands and stage results enter the same mailbox and are handled
one at a time, so wire order is mailbox order and no two handlers race on
session state. Every server event gets the next `server_event_seq` and is
appended to the session's Redis journal before it is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from antiphon.common.audio import StreamResampler
from antiphon.common.ids import new_id
from antiphon.session import items, session_config
from antiphon.session.conversation import Conversation, ItemNotFound
from antiphon.session.metrics import SessionMetrics
from antiphon.session.playback import Ledger, Ledgers
from antiphon.session.responses import Event, ResponseOptions, ResponseState, item_status
from antiphon.session.settings import SessionSettings
from antiphon.session.snapshot import Snapshot, token_hash, token_matches
from antiphon.session.stages import BindError, Binding, Released, StageResult, StreamEnded
from antiphon.session.store import NotOwnerError, SessionStore
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

log = logging.getLogger(__name__)
tracer = trace.get_tracer("antiphon.session")

# Mailbox entries: (source, payload). Sources: "open", "resume", "recover",
# "cmd", "stage0", "stage1" (a StageResult or StreamEnded), "detached",
# "grace_expired", "tick", "ownership_lost", "shutdown".
Mail = tuple[str, Any]

STAGE0_RATE = 16000
GENERATION_EVENTS = ("delta", "done", "error")


@dataclass
class PendingItem:
    """A committed user item whose transcript stage0 has not returned yet."""

    previous_item_id: str
    # `input.text.append` text that joins this turn.
    extra_text: str = ""
    # Created with `conversation.item.create` (audio to transcribe): where it goes.
    created: cpb.Item | None = None
    insert_after: str | None = None


class Refusal(Exception):
    """A resume refused; carries the error event the client gets."""

    def __init__(self, type_: str, code: str, message: str, param: str = "") -> None:
        super().__init__(message)
        self.event = spb.ErrorEvent(type=type_, code=code, message=message, param=param)

    @classmethod
    def unbound(cls, exc: BindError) -> Refusal:
        """No stage worker took the session (on open, takeover or resume)."""
        return cls(exc.error_type, exc.code, str(exc))


Outbound = asyncio.Queue[spb.ServerEvent | None]
# (stage, address that failed or "") -> a binding to another worker of that
# stage (any, for ""); raises BindError.
Rebind = Callable[[str, str], Awaitable[Binding[Any]]]


class SessionActor:
    def __init__(
        self,
        *,
        snapshot: Snapshot,
        owner_token: str,
        store: SessionStore,
        settings: SessionSettings,
        metrics: SessionMetrics,
        stage0: Binding[stage_pb2.Stage0Request],
        stage1: Binding[stage_pb2.Stage1Request],
        mailbox: asyncio.Queue[Mail],
        rebind: Rebind,
    ) -> None:
        self.session_id = snapshot.session_id
        self.owner_token = owner_token
        self._incarnation = snapshot.incarnation
        self._config = snapshot.config
        self._capabilities = snapshot.capabilities
        self._store = store
        self._settings = settings
        self._metrics = metrics
        self._stage0 = stage0
        self._stage1 = stage1
        # Created before the stage bindings, which post their results into it.
        self.mailbox = mailbox
        self._rebind = rebind
        # Stages whose worker died with no replacement yet: stage -> its address.
        self._unbound: dict[str, str] = {}
        self._outbound: Outbound | None = None
        self._seq = snapshot.seq
        self._epoch = snapshot.epoch
        self._turn_id = snapshot.turn_id
        self._attachment = snapshot.attachment
        self._token_hash = snapshot.token_hash
        self._resume_token = ""
        # A response left open by a previous owner, to be ended on takeover.
        self._orphaned_response = snapshot.active_response
        self._last_activity = time.monotonic()
        self._input_bytes = 0
        self._resampler: StreamResampler | None = None
        self._last_item_id = snapshot.last_item_id
        self._speech_item_id = ""
        self._speech_start_ms = 0
        self._pending: dict[str, PendingItem] = {}
        # `input.text.append` text waiting for the turn's commit.
        self._pending_text: list[str] = []
        self._conversation = Conversation(store, self.session_id, owner_token)
        self._ledgers = Ledgers()
        self._response: ResponseState | None = None
        self._deferred: ResponseOptions | None = None
        # The reply a client's truncate stopped, until its own cancel arrives.
        self._stopped_by_truncate = ""
        self._closed = asyncio.Event()
        self._grace_timer: asyncio.TimerHandle | None = None
        # No stream attached: the client may resume within the grace period.
        # A detached session holds no stage worker slot (see `_release_stages`).
        self._detached = False

    # ----------------------------------------------------------- outside
    def post(self, source: str, payload: Any) -> None:
        self.mailbox.put_nowait((source, payload))

    async def request(self, source: str, payload: Any) -> Any:
        """Post mail that answers: the actor settles the future in mailbox order."""
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.post(source, (payload, answer))
        return await answer

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def run(self) -> None:
        """Handle mail until the session closes."""
        try:
            while not self._closed.is_set():
                source, payload = await self.mailbox.get()
                try:
                    await self._handle(source, payload)
                except NotOwnerError:
                    pass  # stood down: another replica carries the session on
                except Exception:
                    log.exception("session handler failed", extra={"session_id": self.session_id})
                    with contextlib.suppress(Exception):
                        await self._error("server_error", "internal_error", "internal error", "")
        finally:
            if self._outbound is not None:
                self._outbound.put_nowait(None)

    def _attach(self) -> tuple[Outbound, int]:
        """A new outbound queue for the stream that now owns the client side.

        The previous stream, if any, is told `session.replaced` and ended;
        commands still arriving from it carry its old generation and are
        refused."""
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None
        if self._outbound is not None:
            replaced = spb.SessionReplaced(
                session_id=self.session_id, attachment_generation=self._attachment
            )
            self._outbound.put_nowait(
                spb.ServerEvent(seq=self._seq, event_id=new_id("event"), session_replaced=replaced)
            )
            self._outbound.put_nowait(None)
            self._metrics.takeovers.labels("attachment").inc()
        self._attachment += 1
        self._outbound = asyncio.Queue()
        self._detached = False
        self._last_activity = time.monotonic()
        return self._outbound, self._attachment

    def _rotate_token(self) -> None:
        self._resume_token = new_id("rt")
        self._token_hash = token_hash(self._resume_token)

    async def _open(self, on_connect: bool, answer: asyncio.Future[Any]) -> None:
        """A new session: attach its first stream, then announce it. Opened by
        a client's `session.update`, its `session.updated` follows; opened by
        the connection itself (`on_connect`), no update was asked for."""
        outbound, generation = self._attach()
        self._rotate_token()
        answer.set_result((outbound, generation))
        self._bind_stages()
        await self._persist()
        await self._emit("session_created", self._state(with_token=True))
        if not on_connect:
            await self._emit("session_updated", self._state())

    async def _resume(self, cmd: spb.ResumeSession, answer: asyncio.Future[Any]) -> None:
        """Re-attach on a new stream and replay what the client has not seen."""
        if cmd.incarnation != self._incarnation or not token_matches(
            cmd.resume_token, self._token_hash
        ):
            answer.set_exception(
                Refusal(
                    "invalid_request_error",
                    "session_resume_refused",
                    "resume token or incarnation does not match the session",
                    "resume_token",
                )
            )
            return
        if self._detached:
            try:
                await self._bind_released()
            except BindError as exc:
                # Still detached, holding no slot: the client may try again
                # until its grace period ends.
                self._metrics.sessions_refused.labels(exc.refused_reason).inc()
                answer.set_exception(Refusal.unbound(exc))
                return
        outbound, generation = self._attach()
        self._rotate_token()
        await self._persist()
        self._metrics.resumes.inc()
        cursor = cmd.last_received_seq
        resumed = spb.SessionResumed(
            session_id=self.session_id,
            incarnation=self._incarnation,
            attachment_generation=generation,
            resume_token=self._resume_token,
            session=self._state(),
        )
        outbound.put_nowait(
            spb.ServerEvent(seq=cursor, event_id=new_id("event"), session_resumed=resumed)
        )
        journal = await self._store.journal_since(self.session_id, cursor)
        if journal.missing:
            resync = spb.ResyncRequired(session_id=self.session_id, reason=journal.missing)
            outbound.put_nowait(
                spb.ServerEvent(seq=cursor, event_id=new_id("event"), resync_required=resync)
            )
            outbound.put_nowait(None)
            self._outbound = None
        else:
            for _seq, payload in journal.events:
                outbound.put_nowait(spb.ServerEvent.FromString(payload))
        answer.set_result((outbound, generation))

    def _bind_stages(self, only: str = "") -> None:
        """Open this session on its stage workers (again, after a takeover or
        on a replacement worker)."""
        if only != "stage1":
            self._open_stage0()
        if only != "stage0":
            self._open_stage1()

    def _open_stage0(self) -> None:
        self._stage0.send(stage_pb2.Stage0Request(open=self._stage0_open()))

    def _stage0_open(self) -> stage_pb2.Stage0Open:
        lane = session_config.lane(self._config)
        return stage_pb2.Stage0Open(
            session_id=self.session_id,
            lane=lane,
            turn_detection=self._config.turn_detection,
            skip_vad=lane == stage_pb2.LANE_MANUAL and self._overlap_policy() == "listen_only",
        )

    def _open_stage1(self) -> None:
        self._stage1.send(
            stage_pb2.Stage1Request(
                open=stage_pb2.Stage1Open(
                    session_id=self.session_id,
                    voice=self._config.voice,
                    sample_rate_hz=self._config.output_audio_format.sample_rate_hz,
                )
            )
        )

    async def _recover(self) -> None:
        """Taken over: bind the stages again and end what the old owner left open."""
        self._bind_stages()
        orphan, self._orphaned_response = self._orphaned_response, None
        if orphan is not None:
            # Its stage work died with the old owner: end it, never leave it open.
            orphan.status = "failed"
            orphan.status_reason = "session_owner_changed"
            del orphan.output[:]
            await self._emit("response_done", spb.ResponseEvent(response=orphan))
            await self._emit("rate_limits_updated", spb.RateLimitsUpdated())
        await self._persist()

    # -------------------------------------------------------- detaching
    async def _client_gone(self, gone: spb.ClientGone) -> None:
        """The client's socket closed. A goodbye ends the session at once
        (its admission and stage slots free for the next client), unless the
        session is resumable; anything else only detaches it."""
        log.info(
            "client gone",
            extra={"session_id": self.session_id, "clean": gone.clean, "code": gone.close_code},
        )
        if gone.clean and not self._config.resumable:
            await self._close("client_closed")
        else:
            await self._detach(self._attachment, "resumable_close" if gone.clean else "dropped")

    async def _detach(self, generation: int, how: str) -> None:
        """No stream is attached: resumable for `disconnect_grace_s`, with no
        stage worker slot held meanwhile (a resume binds again)."""
        if generation != self._attachment or self._detached or self._closed.is_set():
            return  # a replaced stream, or already detached by the client's word
        self._detached = True
        self._metrics.detached.labels(how).inc()
        if self._outbound is not None:
            # Ends the stream, when it is still open (the client's going came
            # as a command): its gateway is waiting for that.
            self._outbound.put_nowait(None)
            self._outbound = None
        loop = asyncio.get_running_loop()
        self._grace_timer = loop.call_later(
            self._settings.disconnect_grace_s, self.post, "grace_expired", generation
        )
        await self._release_stages()

    async def _release_stages(self) -> None:
        """Give the stage workers' slots back. What needs them ends first: a
        response in flight (`cancelled`, `client_disconnected`; as far as it
        was sent it enters history, as any cancelled answer does) and the
        uncommitted input. A committed turn stage0 still owes a transcript
        keeps stage0 until it is heard, so the user's last words are kept."""
        self._deferred = None
        if self._response is not None:
            await self._cancel_active("client_disconnected")
        if self._input_bytes:
            # The uncommitted audio lives on stage0. Journaled: the resumed
            # client learns that its unfinished turn is gone.
            self._stage0.send(
                stage_pb2.Stage0Request(clear_input=stage_pb2.Stage0ClearInput(epoch=self._epoch))
            )
            self._input_bytes = 0
            await self._emit("input_cleared", spb.InputCleared())
        self._resampler = None
        self._speech_item_id = ""
        self._unbound.clear()
        await self._release_stage1()
        if not self._pending:
            await self._release_stage0()

    async def _release_stage0(self) -> None:
        if isinstance(self._stage0, Released):
            return
        binding = self._stage0
        self._stage0 = Released()
        await binding.close()
        await self._persist()

    async def _release_stage1(self) -> None:
        if isinstance(self._stage1, Released):
            return
        binding = self._stage1
        self._stage1 = Released()
        await binding.close()
        await self._persist()

    async def _bind_released(self) -> None:
        """Coming back from detached: bind again the stages given back, each
        opened as a fresh session on its worker (as after a fail-over). On a
        refusal the session stays detached and holds nothing."""
        fresh: list[str] = []
        try:
            if isinstance(self._stage0, Released):
                self._stage0 = await self._rebind("stage0", "")
                fresh.append("stage0")
            if isinstance(self._stage1, Released):
                self._stage1 = await self._rebind("stage1", "")
                fresh.append("stage1")
        except BaseException:
            for stage in fresh:
                await self._release_stage0() if stage == "stage0" else await self._release_stage1()
            raise
        for stage in fresh:
            self._bind_stages(stage)

    # ---------------------------------------------------------- dispatch
    async def _handle(self, source: str, payload: Any) -> None:
        if source == "cmd":
            generation, cmd = payload
            if generation != self._attachment:
                # A write from a replaced attachment: refused, never applied.
                self._metrics.stale_dropped.labels("attachment").inc()
                return
            self._last_activity = time.monotonic()
            await self._command(cmd)
        elif source == "open":
            await self._open(*payload)
        elif source == "resume":
            await self._resume(*payload)
        elif source == "recover":
            await self._recover()
        elif source == "tick":
            await self._tick()
        elif source == "ownership_lost":
            self._stand_down()
        elif source in ("stage0", "stage1"):
            await self._stage_result(source, payload)
        elif source == "detached":
            # The stream ended with no word from the client: its gateway died
            # or drained, and the client may come back through another.
            await self._detach(payload, "stream_lost")
        elif source == "shutdown":
            # Draining: hand the session on. The stream ends without a word;
            # the gateway resumes it on another replica.
            self._stand_down(notify=False)
        elif source == "grace_expired":
            if payload == self._attachment and self._detached:
                await self._expire("disconnect_grace_expired")

    async def _command(self, cmd: spb.ClientCommand) -> None:
        kind = cmd.WhichOneof("kind")
        self._metrics.commands.labels(kind or "none").inc()
        if kind == "append_audio":
            with self._metrics.append_latency.time():
                await self._append(cmd)
        elif kind == "commit":
            await self._commit(cmd)
        elif kind == "clear_input":
            self._clear_input()
            await self._emit("input_cleared", spb.InputCleared())
        elif kind == "cancel_input":
            await self._cancel_input()
        elif kind == "append_text":
            self._pending_text.append(cmd.append_text.text)
        elif kind in ("create_item", "retrieve_item", "delete_item", "truncate_item"):
            await self._item_command(cmd)
        elif kind == "clear_output_audio":
            r = self._response
            if r is not None:
                await self._cancel_active("output_audio_cleared")
            await self._emit(
                "output_audio_cleared", spb.OutputAudioCleared(response_id=r.id if r else "")
            )
        elif kind == "barge_in":
            await self._barge_in(cmd)
        elif kind == "playback_ack":
            await self._playback_ack(cmd)
        elif kind == "update":
            await self._update(cmd)
        elif kind == "create_response":
            await self._create_response(cmd)
        elif kind == "cancel_response":
            await self._cancel_response(cmd)
        elif kind == "heartbeat":
            # Any command refreshes the idle lease; this one only does that.
            await self._emit("heartbeat_ack", spb.HeartbeatAck(session_id=self.session_id))
        elif kind == "event_ack":
            await self._store.trim_acked(self.session_id, self.owner_token, cmd.event_ack.seq)
        elif kind == "close":
            await self._close("session_close")
        elif kind == "client_gone":
            await self._client_gone(cmd.client_gone)
        elif kind == "rejected":
            self._metrics.errors.labels(cmd.rejected.code).inc()
            await self._emit("error", cmd.rejected)
        else:
            await self._error(
                "invalid_request_error", "invalid_event", f"unexpected command {kind}", cmd.event_id
            )

    # ------------------------------------------------------------- input
    async def _append(self, cmd: spb.ClientCommand) -> None:
        if cmd.operation_id and not await self._store.record_operation(
            self.session_id, self.owner_token, cmd.operation_id
        ):
            # A retry of an append already applied: its result was nothing, so
            # the cached result is nothing too.
            self._metrics.duplicates.inc()
            return
        if self._input_bytes >= self._settings.max_pending_input_bytes_per_session:
            await self._error(
                "rate_limit_error",
                "input_buffer_full",
                "pending input exceeds max_pending_input_bytes_per_session "
                f"({self._settings.max_pending_input_bytes_per_session}); commit or clear it",
                cmd.event_id,
            )
            return
        audio = cmd.append_audio
        rate = audio.sample_rate_hz or self._config.input_audio_format.sample_rate_hz
        if rate not in session_config.INPUT_RATES:
            await self._error(
                "invalid_request_error",
                "unsupported_audio_format",
                f"sample_rate_hz must be one of {session_config.INPUT_RATES}",
                cmd.event_id,
                "sample_rate_hz",
            )
            return
        # Resampled here, once, in mailbox order: an append right after a
        # session.update is read at the rate that update made effective.
        if self._resampler is None or self._resampler.in_rate != rate:
            self._resampler = StreamResampler(rate, STAGE0_RATE)
        pcm = self._resampler.process(audio.pcm16)
        self._input_bytes += len(pcm)
        self._stage0.send(
            stage_pb2.Stage0Request(audio=stage_pb2.Stage0Audio(epoch=self._epoch, pcm16=pcm))
        )

    async def _commit(self, cmd: spb.ClientCommand) -> None:
        if cmd.commit.HasField("is_speech") and not cmd.commit.is_speech:
            # A declared silence: no user item, the model keeps listening.
            self._stage0.send(
                stage_pb2.Stage0Request(clear_input=stage_pb2.Stage0ClearInput(epoch=self._epoch))
            )
            self._input_bytes = 0
            await self._emit("input_committed", self._committed_without_item())
            await self._listen("silence_commit")
            return
        if len(self._pending) >= self._settings.max_pending_turns_per_session:
            await self._error(
                "rate_limit_error",
                "too_many_pending_turns",
                "max_pending_turns_per_session "
                f"({self._settings.max_pending_turns_per_session}) turns are still being processed",
                cmd.event_id,
            )
            return
        if self._input_bytes == 0 and self._pending_text:
            await self._commit_text()
            return
        if self._input_bytes == 0:
            await self._error(
                "invalid_request_error",
                "input_audio_buffer_empty",
                "input_audio_buffer.commit requires a non-empty input audio buffer.",
                cmd.event_id,
            )
            return
        if await self._acknowledged_overlap(self._input_bytes // (STAGE0_RATE // 500)):
            return
        if self._resampler is not None:
            # The resampler's filter still holds the last few ms of the turn.
            tail = self._resampler.flush()
            if tail:
                self._stage0.send(
                    stage_pb2.Stage0Request(
                        audio=stage_pb2.Stage0Audio(epoch=self._epoch, pcm16=tail)
                    )
                )
        await self._commit_audio()

    async def _acknowledged_overlap(self, speech_ms: int, item_id: str = "") -> bool:
        """A short remark over an auto-response ("mm-hm"): acknowledged, not a turn."""
        if (
            self._response is None
            or not self._auto_response()
            or speech_ms >= self._settings.short_overlap_ms
        ):
            return False
        self._clear_input()
        await self._emit("input_committed", self._committed_without_item(item_id))
        await self._overlap("drop", "short_overlap", speech_ms)
        return True

    async def _commit_text(self) -> None:
        """A turn of `input.text.append` text only: the user item exists at once."""
        item_id = new_id("item")
        previous = self._last_item_id
        self._turn_id += 1
        self._last_item_id = item_id
        item = items.user_text_item(item_id, " ".join(self._pending_text))
        self._pending_text.clear()
        await self._conversation.append(item)
        await self._emit_all(
            [
                *item_events(previous, item, "item_added", "item_created"),
                ("input_committed", self._committed(previous, item_id)),
                ("item_done", spb.ItemEvent(previous_item_id=previous, item=item)),
            ]
        )
        await self._persist()
        if self._auto_response():
            await self._start_response(self._default_options(), eager=True)

    async def _commit_audio(self, item_id: str = "") -> None:
        """Seal the buffered audio into a user item; its transcript follows from stage0."""
        item_id = item_id or new_id("item")
        previous = self._last_item_id
        self._turn_id += 1
        self._input_bytes = 0
        self._pending[item_id] = PendingItem(
            previous_item_id=previous, extra_text=" ".join(self._pending_text)
        )
        self._pending_text.clear()
        self._last_item_id = item_id
        self._stage0.send(
            stage_pb2.Stage0Request(
                commit=stage_pb2.Stage0Commit(epoch=self._epoch, item_id=item_id)
            )
        )
        item = items.user_audio_item(item_id, "")
        await self._emit_all(
            [
                *item_events(previous, item, "item_added", "item_created"),
                ("input_committed", self._committed(previous, item_id)),
            ]
        )
        await self._persist()
        if self._auto_response():
            await self._start_response(self._default_options(), eager=True)

    async def _user_item_done(self, item_id: str, pending: PendingItem, transcript: str) -> None:
        previous = pending.previous_item_id
        if pending.created is not None:
            # A `conversation.item.create` audio item, heard now: stored where asked.
            item = items.with_transcript(pending.created, transcript)
            try:
                await self._conversation.insert(item, pending.insert_after)
            except ItemNotFound:
                await self._conversation.append(item)
            await self._emit_all(
                [
                    *item_events(previous, item, "item_added", "item_created", "item_done"),
                ]
            )
            return
        item = items.user_audio_item(item_id, transcript, pending.extra_text)
        await self._conversation.append(item)
        await self._emit_all(
            [
                (
                    "transcription_completed",
                    spb.TranscriptionCompleted(item_id=item_id, transcript=transcript),
                ),
                ("item_done", spb.ItemEvent(previous_item_id=previous, item=item)),
            ]
        )

    def _committed_without_item(self, item_id: str = "") -> spb.InputCommitted:
        """The acknowledgement of a commit that made no turn (silence, a short
        remark). It still names an item, as every commit does (OpenAI's
        `committed.item_id` is never null): the one the VAD announced, or a
        fresh id that no item will take."""
        return spb.InputCommitted(
            previous_item_id=self._last_item_id,
            item_id=item_id or new_id("item"),
            turn_id=self._turn_id,
            epoch=self._epoch,
            session_id=self.session_id,
        )

    def _committed(self, previous: str, item_id: str) -> spb.InputCommitted:
        return spb.InputCommitted(
            previous_item_id=previous,
            item_id=item_id,
            turn_id=self._turn_id,
            epoch=self._epoch,
            history_len=len(self._pending),
            session_id=self.session_id,
            response_create_deferred=self._response is not None,
        )

    # ------------------------------------------------------------ config
    async def _update(self, cmd: spb.ClientCommand) -> None:
        try:
            merged = session_config.merge(
                self._config,
                cmd.update.config,
                max_output_tokens=self._settings.max_output_tokens,
            )
        except session_config.ConfigError as exc:
            await self._error("invalid_request_error", exc.code, str(exc), cmd.event_id, exc.param)
            return
        if (
            merged.overlap_policy == "barge_in_on_speech"
            and not self._capabilities.supports_barge_in
        ):
            await self._unsupported(cmd, "supports_barge_in")
            return
        lane_changed = session_config.lane(merged) != session_config.lane(self._config)
        self._config = merged
        await self._store.set_fields(
            self.session_id, self.owner_token, {"config": merged.SerializeToString()}
        )
        if (
            lane_changed
            or cmd.update.config.has_turn_detection
            or cmd.update.config.HasField("overlap_policy")
        ):
            self._stage0.send(stage_pb2.Stage0Request(configure=self._stage0_open()))
        await self._emit("session_updated", self._state())

    # --------------------------------------------------------- responses
    def _auto_response(self) -> bool:
        lane = session_config.lane(self._config)
        if lane == stage_pb2.LANE_SERVER_VAD:
            return self._config.turn_detection.create_response
        if lane == stage_pb2.LANE_NATIVE:
            return self._config.auto_response
        return False

    def _default_options(self) -> ResponseOptions:
        return ResponseOptions(
            instructions=self._config.instructions,
            output_modalities=list(self._config.output_modalities),
            temperature=self._config.temperature,
            max_output_tokens=self._config.max_output_tokens or self._settings.max_output_tokens,
        )

    async def _create_response(self, cmd: spb.ClientCommand) -> None:
        if self._response is not None:
            await self._error(
                "invalid_request_error",
                "conversation_already_has_active_response",
                f"Conversation already has an active response in progress: {self._response.id}.",
                cmd.event_id,
            )
            return
        req = cmd.create_response
        opts = self._default_options()
        if req.HasField("instructions"):
            opts.instructions = req.instructions
        if req.output_modalities:
            opts.output_modalities = list(req.output_modalities)
        if req.HasField("temperature"):
            opts.temperature = req.temperature
        if req.HasField("max_output_tokens"):
            ceiling = self._settings.max_output_tokens
            opts.max_output_tokens = min(req.max_output_tokens or ceiling, ceiling)
        opts.metadata = dict(req.metadata)
        await self._start_response(opts, eager=True)

    async def _start_response(self, opts: ResponseOptions, *, eager: bool) -> None:
        if self._response is not None:
            self._deferred = opts
            return
        rid = new_id("resp")
        self._response = ResponseState(
            id=rid,
            item_id=f"item_{rid}",
            session_id=self.session_id,
            epoch=self._epoch,
            turn_id=self._turn_id,
            previous_item_id=self._last_item_id,
            options=opts,
        )
        self._last_item_id = self._response.item_id
        await self._persist()
        if eager:
            await self._emit_all(self._response.created_events())
        if not self._pending:
            await self._generate(self._response)

    async def _generate(self, r: ResponseState) -> None:
        """Ask stage0 for the answer, prompting with the committed history."""
        r.generation_requested = True
        messages = [cpb.ChatMessage(role="system", content=r.options.instructions)]
        for item in await self._conversation.items():
            messages.extend(items.prompt_messages(item))
        self._stage0.send(
            stage_pb2.Stage0Request(
                generate=stage_pb2.Generate(
                    epoch=r.epoch,
                    response_id=r.id,
                    messages=messages,
                    temperature=r.options.temperature,
                    max_output_tokens=r.options.max_output_tokens,
                )
            )
        )

    async def _cancel_response(self, cmd: spb.ClientCommand) -> None:
        r = self._response
        wanted = cmd.cancel_response.response_id
        if r is None and self._stopped_by_truncate and wanted in ("", self._stopped_by_truncate):
            # The cancel that follows a truncate of the reply being said (the
            # OpenAI SDKs send both): the truncate already stopped it.
            self._stopped_by_truncate = ""
            return
        if r is None or (wanted and wanted != r.id):
            await self._error(
                "invalid_request_error",
                "response_cancel_not_active",
                "Cancellation failed: no active response found.",
                cmd.event_id,
            )
            return
        await self._cancel_active("client_cancelled")

    async def _cancel_active(self, reason: str) -> None:
        """Advance the epoch so no stale output of the old one is accepted, then end it."""
        r = self._response
        self._advance_epoch()
        await self._persist()
        if r is not None:
            await self._finish(r, "cancelled", reason)

    def _advance_epoch(self) -> None:
        """Fence: both stages stop and drop all work of earlier epochs."""
        self._epoch += 1
        self._stage0.send(stage_pb2.Stage0Request(cancel=stage_pb2.Stage0Cancel(epoch=self._epoch)))
        self._stage1.send(stage_pb2.Stage1Request(cancel=stage_pb2.Stage1Cancel(epoch=self._epoch)))

    async def _finish(self, r: ResponseState, status: str, reason: str = "") -> None:
        if not r.created:
            await self._emit_all(r.created_events())
        await self._emit_all(
            r.terminal_events(status, reason, with_metrics=self._config.return_stage_metrics)
        )
        spoke = bool(r.transcript if r.audio else r.text)
        if self._config.playback_commit_policy == "commit_all_on_done" and (
            status == "completed" or (status == "cancelled" and spoke)
        ):
            # Everything sent counts as said; a later truncation cuts it to what was heard.
            await self._store_assistant(r.item(item_status(status)), r.ledger)
        self._ledgers.add(r.ledger)
        self._metrics.responses.labels(status).inc()
        self._response = None
        await self._persist()
        if self._deferred is not None:
            opts, self._deferred = self._deferred, None
            await self._start_response(opts, eager=True)

    async def _listen(self, reason: str) -> None:
        await self._emit(
            "response_listen",
            spb.Listen(session_id=self.session_id, epoch=self._epoch, reason=reason),
        )

    # ------------------------------------------------------------- input control
    def _clear_input(self) -> None:
        self._stage0.send(
            stage_pb2.Stage0Request(clear_input=stage_pb2.Stage0ClearInput(epoch=self._epoch))
        )
        self._input_bytes = 0
        self._pending_text.clear()

    async def _cancel_input(self) -> None:
        """`input.cancel`: a new epoch; the input and any response of the old one end."""
        if self._response is not None:
            await self._cancel_active("input_cancelled")
        else:
            self._advance_epoch()
            await self._persist()
        self._clear_input()
        # Projected as `input_audio_buffer.cleared` (with the native event inside).
        await self._emit(
            "input_cancelled", spb.InputCancelled(session_id=self.session_id, epoch=self._epoch)
        )

    async def _barge_in(self, cmd: spb.ClientCommand) -> None:
        """The client's own VAD heard the user over the assistant."""
        if not self._capabilities.supports_barge_in:
            await self._unsupported(cmd, "supports_barge_in")
            return
        await self._overlap("barge_in", f"client_{cmd.barge_in.source or 'signal'}")
        if self._response is not None:
            await self._cancel_active("barge_in")

    async def _overlap(self, action: str, reason: str, overlap_ms: int = 0) -> None:
        await self._emit(
            "overlap_decision",
            spb.OverlapDecision(
                session_id=self.session_id,
                epoch=self._epoch,
                policy=self._overlap_policy(),
                action=action,
                reason=reason,
                overlap_ms=overlap_ms,
                buffer_audio=action == "listen",
                defer_runtime_append=action == "listen",
                force_listen=action == "listen",
            ),
        )

    def _overlap_policy(self) -> str:
        """`barge_in_on_speech` when asked for, or implied by server VAD's `interrupt_response`."""
        td = self._config.turn_detection
        vad_interrupts = session_config.lane(self._config) == stage_pb2.LANE_SERVER_VAD and (
            td.interrupt_response if td.HasField("interrupt_response") else True
        )
        if self._config.overlap_policy == "barge_in_on_speech" or vad_interrupts:
            return "barge_in_on_speech"
        return "listen_only"

    async def _speech_over_response(self) -> None:
        """The user started speaking: if the assistant is answering, the overlap policy decides."""
        if self._response is None:
            return
        if self._overlap_policy() == "barge_in_on_speech":
            await self._overlap("barge_in", "server_vad_utterance_active")
            await self._cancel_active("barge_in")
        elif session_config.lane(self._config) != stage_pb2.LANE_MANUAL:
            # The answer goes on; what the user says is kept for the turn's end.
            await self._overlap("listen", "overlap_speech")

    async def _unsupported(self, cmd: spb.ClientCommand, capability: str) -> None:
        await self._error(
            "invalid_request_error",
            "unsupported_capability",
            f"{cmd.client_type or 'this event'} needs {capability}, "
            f"which the bound backend ({self._capabilities.implementation_level}) lacks",
            cmd.event_id,
            "type",
        )

    # ------------------------------------------------------------- items
    async def _item_command(self, cmd: spb.ClientCommand) -> None:
        kind = cmd.WhichOneof("kind")
        try:
            if kind == "create_item":
                await self._create_item(cmd)
            elif kind == "retrieve_item":
                item = await self._conversation.get(cmd.retrieve_item.item_id)
                await self._emit("item_retrieved", spb.ItemRetrieved(item=item))
            elif kind == "delete_item":
                await self._conversation.delete(cmd.delete_item.item_id)
                if cmd.delete_item.item_id == self._last_item_id:
                    self._last_item_id = await self._conversation.last_id()
                    await self._persist()
                await self._emit("item_deleted", spb.ItemDeleted(item_id=cmd.delete_item.item_id))
            elif kind == "truncate_item":
                await self._truncate_item(cmd)
        except ItemNotFound as exc:
            param = "previous_item_id" if kind == "create_item" else "item_id"
            await self._error(
                "invalid_request_error",
                "item_not_found",
                f"Item with item_id '{exc.item_id}' not found in the conversation.",
                cmd.event_id,
                param,
                client_type=cmd.client_type,
            )

    async def _create_item(self, cmd: spb.ClientCommand) -> None:
        req = cmd.create_item
        after = req.previous_item_id if req.HasField("previous_item_id") else None
        item = items.created_item(req.item, new_id("item"), new_id("call"))
        audio = items.needs_transcription(req.item)
        if audio:
            # Heard by stage0 like a commit, then stored where it was asked to go.
            if self._input_bytes:
                await self._error(
                    "invalid_request_error",
                    "input_audio_buffer_not_empty",
                    "commit or clear the input audio buffer before creating an audio item",
                    cmd.event_id,
                    "item.content",
                )
                return
            if after:
                await self._conversation.get(after)  # ItemNotFound before anything changes
            rate = next(p.sample_rate_hz for p in req.item.content if p.audio)
            rate = rate or self._config.input_audio_format.sample_rate_hz
            resampler = StreamResampler(rate, STAGE0_RATE)
            pcm = resampler.process(audio) + resampler.flush()
            self._stage0.send(
                stage_pb2.Stage0Request(audio=stage_pb2.Stage0Audio(epoch=self._epoch, pcm16=pcm))
            )
            self._pending[item.id] = PendingItem(
                previous_item_id=after if after is not None else self._last_item_id,
                created=item,
                insert_after=after,
            )
            self._stage0.send(
                stage_pb2.Stage0Request(
                    commit=stage_pb2.Stage0Commit(epoch=self._epoch, item_id=item.id)
                )
            )
            if after is None:
                self._last_item_id = item.id
            return
        await self._conversation.insert(item, after)
        previous = after if after is not None else self._last_item_id
        if after is None:
            self._last_item_id = item.id
            await self._persist()
        await self._emit_all(
            [
                *item_events(previous, item, "item_added", "item_created", "item_done"),
            ]
        )

    async def _truncate_item(self, cmd: spb.ClientCommand) -> None:
        req = cmd.truncate_item
        if not self._capabilities.supports_audio_truncate:
            await self._unsupported(cmd, "supports_audio_truncate")
            return
        r = self._response
        if r is not None and r.item_id == req.item_id:
            # Truncating what is still being said: it stops first.
            self._stopped_by_truncate = r.id
            await self._cancel_active("client_cancelled")
        ledger = self._ledgers.find(item_id=req.item_id)
        if ledger is None:
            await self._conversation.get(req.item_id)  # an unknown id is item_not_found
            await self._error(
                "invalid_request_error",
                "invalid_value",
                "only an assistant audio item of this session can be truncated",
                cmd.event_id,
                "item_id",
            )
            return
        if req.audio_end_ms > ledger.sent_ms:
            await self._error(
                "invalid_request_error",
                "invalid_value",
                f"audio_end_ms {req.audio_end_ms} is past the item's audio ({ledger.sent_ms} ms)",
                cmd.event_id,
                "audio_end_ms",
            )
            return
        heard = await self._store_heard(ledger, req.audio_end_ms)
        await self._emit(
            "item_truncated",
            spb.ItemTruncated(
                item_id=req.item_id,
                content_index=req.content_index,
                audio_end_ms=req.audio_end_ms,
                transcript=heard,
            ),
        )

    async def _store_heard(self, ledger: Ledger, audio_end_ms: int) -> str:
        """Keep in history the words whose audio ends by `audio_end_ms`: the next prompt."""
        heard = ledger.heard(audio_end_ms)
        item = items.with_transcript(
            cpb.Item(
                id=ledger.item_id,
                type="message",
                role="assistant",
                status="incomplete",
                content=[cpb.ContentPart(type="output_audio")],
            ),
            heard,
        )
        if ledger.in_history:
            await self._conversation.replace(item)
        else:
            await self._store_assistant(item, ledger)
        return heard

    async def _store_assistant(self, item: cpb.Item, ledger: Ledger) -> None:
        """Into history right after the turn it answers, even if later turns came first."""
        try:
            await self._conversation.insert(item, ledger.previous_item_id)
        except ItemNotFound:
            await self._conversation.append(item)  # that turn was deleted meanwhile
        ledger.in_history = True

    # ------------------------------------------------------------- playback
    async def _playback_ack(self, cmd: spb.ClientCommand) -> None:
        ack = cmd.playback_ack
        ledger = self._ledgers.find(response_id=ack.response_id, item_id=ack.item_id)
        r = self._response
        if ledger is None and r is not None and ack.response_id in ("", r.id):
            ledger = r.ledger
        if ledger is None:
            await self._error(
                "invalid_request_error",
                "response_not_found",
                f"no response {ack.response_id or ack.item_id} of this session to acknowledge",
                cmd.event_id,
                "response_id",
            )
            return
        committed = ack.committed_ms if ack.HasField("committed_ms") else ack.played_ms
        ledger.acknowledge(ack.played_ms, committed)
        done = r is None or r.ledger is not ledger
        if done and (ack.truncate or self._config.playback_commit_policy == "ack_only"):
            # What was heard becomes the history (ack_only), or cuts it (truncate).
            await self._store_heard(ledger, ledger.committed_ms)
        await self._emit(
            "playback_acknowledged",
            spb.PlaybackAcknowledged(
                session_id=self.session_id,
                epoch=self._epoch,
                response_id=ledger.response_id,
                item_id=ledger.item_id,
                played_ms=ledger.played_ms,
                committed_ms=ledger.committed_ms,
                truncate=ack.truncate,
                playback=ledger.playback(),
                history_committed=ledger.in_history,
            ),
        )

    # ------------------------------------------------------------ stage0
    async def _stage0_event(self, ev: stage_pb2.Stage0Event | StreamEnded) -> None:
        if isinstance(ev, StreamEnded):
            await self._stage_lost("stage0", ev.binding)
            return
        kind = ev.WhichOneof("kind")
        msg = getattr(ev, kind)
        # Only generation is fenced by the epoch. What stage0 heard (VAD events,
        # utterances, transcripts) is the user's input, whatever happened to the
        # reply: the speech that barged in is the next turn, even when its end
        # was detected before stage0 saw the cancel.
        if kind in GENERATION_EVENTS and msg.epoch != self._epoch:
            self._metrics.stale_dropped.labels("stage0").inc()
            return
        lane = session_config.lane(self._config)
        if kind == "speech_started":
            if lane == stage_pb2.LANE_SERVER_VAD:
                self._speech_item_id = new_id("item")
                self._speech_start_ms = msg.audio_start_ms
                await self._emit(
                    "speech_started",
                    spb.SpeechStarted(
                        audio_start_ms=msg.audio_start_ms, item_id=self._speech_item_id
                    ),
                )
            await self._speech_over_response()
        elif kind == "speech_stopped" and lane == stage_pb2.LANE_SERVER_VAD:
            item_id = self._speech_item_id or new_id("item")
            self._speech_item_id = ""
            await self._emit(
                "speech_stopped", spb.SpeechStopped(audio_end_ms=msg.audio_end_ms, item_id=item_id)
            )
            if msg.HasField("speech_ms"):
                speech_ms = msg.speech_ms
            else:
                # The VAD's span holds the prefix padding and the closing silence too.
                td = self._config.turn_detection
                speech_ms = (
                    msg.audio_end_ms
                    - self._speech_start_ms
                    - td.prefix_padding_ms
                    - td.silence_duration_ms
                )
            if self._input_bytes and not await self._acknowledged_overlap(speech_ms, item_id):
                await self._commit_audio(item_id)
        elif kind == "transcript":
            pending = self._pending.pop(msg.item_id, None)
            if pending is not None:
                await self._user_item_done(msg.item_id, pending, msg.text)
            r = self._response
            if not self._pending and r is not None and not r.generation_requested:
                await self._generate(r)
        elif kind == "utterance":
            await self._utterance(msg)
        elif kind == "unit_decision":
            if msg.decision == stage_pb2.DECISION_LISTEN:
                await self._listen("model_listen")
        elif kind == "delta":
            await self._delta(msg)
        elif kind == "done":
            await self._generation_done(msg)
        elif kind == "error":
            await self._stage_error("stage0", msg)

    async def _utterance(self, msg: stage_pb2.Utterance) -> None:
        """Native lane: the model heard a whole utterance and decided."""
        if msg.decision != stage_pb2.DECISION_SPEAK or not msg.transcript.strip():
            self._input_bytes = 0
            await self._listen("model_listen")
            return
        item_id = new_id("item")
        previous = self._last_item_id
        self._turn_id += 1
        self._input_bytes = 0
        self._last_item_id = item_id
        item = items.user_audio_item(item_id, "")
        await self._emit_all(
            [
                *item_events(previous, item, "item_added", "item_created"),
                ("input_committed", self._committed(previous, item_id)),
            ]
        )
        await self._user_item_done(item_id, PendingItem(previous_item_id=previous), msg.transcript)
        await self._persist()
        if self._config.auto_response:
            await self._start_response(self._default_options(), eager=False)

    def _current(self, response_id: str) -> ResponseState | None:
        r = self._response
        if r is None or r.id != response_id:
            self._metrics.stale_dropped.labels("response").inc()
            return None
        return r

    async def _delta(self, msg: stage_pb2.GenerationDelta) -> None:
        r = self._current(msg.response_id)
        if r is None or not msg.text:
            return
        if not r.created:
            await self._emit_all(r.created_events())
        if r.audio:
            r.text += msg.text
            self._stage1.send(
                stage_pb2.Stage1Request(
                    text=stage_pb2.SynthesizeText(epoch=r.epoch, response_id=r.id, text=msg.text)
                )
            )
        else:
            await self._emit_all(r.text_events(msg.text))

    async def _generation_done(self, msg: stage_pb2.GenerationDone) -> None:
        r = self._current(msg.response_id)
        if r is None:
            return
        r.generation_done = True
        # Stage0's numbers, keeping stage1's if its done came first.
        first_audio_ms = r.metrics.stage1_first_audio_ms
        r.metrics.CopyFrom(msg.metrics)
        r.metrics.stage1_first_audio_ms = first_audio_ms
        if not r.created and not r.text:
            # Nothing visible: the model chose to stay silent.
            self._response = None
            await self._listen("model_listen")
            return
        if r.audio:
            self._stage1.send(
                stage_pb2.Stage1Request(
                    text=stage_pb2.SynthesizeText(epoch=r.epoch, response_id=r.id, final=True)
                )
            )
        else:
            await self._finish(r, "completed")

    # ------------------------------------------------------------ stage1
    async def _stage1_event(self, ev: stage_pb2.Stage1Event | StreamEnded) -> None:
        if isinstance(ev, StreamEnded):
            await self._stage_lost("stage1", ev.binding)
            return
        kind = ev.WhichOneof("kind")
        msg = getattr(ev, kind)
        if msg.epoch != self._epoch:
            self._metrics.stale_dropped.labels("stage1").inc()
            return
        if kind == "audio":
            r = self._current(msg.response_id)
            if r is not None:
                await self._emit_all(
                    r.audio_events(
                        msg.pcm16,
                        msg.sample_rate_hz,
                        msg.text,
                        msg.duration_ms,
                        list(msg.marks),
                        self._config.output_audio_format,
                    )
                )
        elif kind == "done":
            r = self._current(msg.response_id)
            if r is not None:
                r.metrics.stage1_first_audio_ms = msg.first_audio_ms
                if r.generation_done:
                    await self._finish(r, "completed")
        elif kind == "error":
            await self._stage_error("stage1", msg)

    async def _stage_error(self, stage: str, msg: stage_pb2.StageError) -> None:
        await self._error("server_error", msg.code or f"{stage}_error", msg.message, "")
        r = self._response
        if r is not None and (not msg.response_id or msg.response_id == r.id):
            await self._finish(r, "failed", msg.code or f"{stage}_error")

    async def _stage_result(self, stage: str, result: StageResult | StreamEnded) -> None:
        current = self._stage0 if stage == "stage0" else self._stage1
        if isinstance(result, StreamEnded):
            event: Any = result  # each handler below knows a stream's end
        elif result.binding is current:
            event = result.event
        else:
            # From a binding this session let go (released at detach, or
            # replaced): what it still had in flight is for nobody.
            self._metrics.stale_dropped.labels(stage).inc()
            return
        if stage == "stage0":
            await self._stage0_event(event)
            if self._detached and not self._pending:
                # The turns it still owed are heard: its slot goes back now.
                await self._release_stage0()
        else:
            await self._stage1_event(event)

    async def _stage_lost(self, stage: str, binding: Binding[Any]) -> None:
        """A stage worker died: end what it owed, and carry on with another."""
        current = self._stage0 if stage == "stage0" else self._stage1
        if self._closed.is_set() or binding is not current:
            return  # a binding we closed or already replaced
        log.warning("stage stream lost", extra={"session_id": self.session_id, "stage": stage})
        self._metrics.stage_failovers.labels(stage).inc()
        if stage == "stage0":
            # Transcripts it owed will not come: those turns end here.
            self._pending.clear()
        if self._response is not None:
            # Never left open: a typed reason, and the next turn works.
            await self._finish(self._response, "failed", f"{stage}_unavailable")
        if self._detached:
            # Nobody to serve: a resume binds a worker again.
            await self._release_stage0() if stage == "stage0" else await self._release_stage1()
            return
        await self._replace_worker(stage, binding.address)

    async def _replace_worker(self, stage: str, failed: str) -> None:
        try:
            replacement = await self._rebind(stage, failed)
        except Exception as exc:
            # Tried again at every tick until a worker of the stage is back.
            self._unbound[stage] = failed
            await self._error(
                "server_error", "stage_unavailable", f"no {stage} worker is available: {exc}", ""
            )
            return
        self._unbound.pop(stage, None)
        if stage == "stage0":
            self._stage0 = replacement
        else:
            self._stage1 = replacement
        self._bind_stages(stage)
        await self._persist()

    # ----------------------------------------------------------- closing
    async def _close(self, reason: str) -> None:
        """The client ended the session: `session.close`, or a clean close of
        its socket (`client_closed`) when the session is not resumable."""
        self._metrics.closed.labels(reason).inc()
        if self._response is not None:
            await self._cancel_active("session_closed")
        await self._emit(
            "session_closed", spb.SessionClosed(session_id=self.session_id, reason=reason)
        )
        await self._cleanup()

    async def _expire(self, reason: str) -> None:
        """A lease ran out: `session.expired`, then the same cleanup as a close."""
        if self._response is not None:
            await self._cancel_active(reason)
        self._metrics.expired.labels(reason).inc()
        await self._emit(
            "session_expired",
            spb.SessionExpired(
                session_id=self.session_id, incarnation=self._incarnation, reason=reason
            ),
        )
        await self._cleanup()

    async def _cleanup(self) -> None:
        """Release what the session holds; its admission slot goes last, so a
        closing session keeps its capacity until cleanup has really finished
        (a failure here leaves the slot to the reaper, which retries)."""
        self._closed.set()
        await self._stage0.close()
        await self._stage1.close()
        await self._store.expire(self.session_id, self._settings.resume_replay_ttl_s)
        await self._store.release(self.session_id)

    def _stand_down(self, *, notify: bool = True) -> None:
        """Stop here without touching the session's state: another replica
        owns it now (`notify`: tell the client's stream it was replaced), or
        will once the client resumes it."""
        if self._closed.is_set():
            return
        log.info("standing down", extra={"session_id": self.session_id})
        self._closed.set()
        if self._outbound is not None and notify:
            replaced = spb.SessionReplaced(
                session_id=self.session_id, attachment_generation=self._attachment
            )
            self._outbound.put_nowait(
                spb.ServerEvent(seq=self._seq, event_id=new_id("event"), session_replaced=replaced)
            )
        for binding in (self._stage0, self._stage1):
            task = asyncio.ensure_future(binding.close())
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _tick(self) -> None:
        """The registry's periodic check: stages to rebind, the idle lease."""
        for stage, failed in list(self._unbound.items()):
            await self._replace_worker(stage, failed)
        idle = time.monotonic() - self._last_activity
        if self._settings.idle_ttl_s and idle > self._settings.idle_ttl_s:
            await self._expire("idle_ttl_expired")

    def shutdown(self) -> None:
        """Drain on SIGTERM: after what it already holds, the actor hands the
        session on (see `_stand_down`)."""
        self.post("shutdown", None)

    # ---------------------------------------------------------- emitting
    def _state(self, *, with_token: bool = False) -> spb.SessionState:
        return spb.SessionState(
            config=self._config,
            session_id=self.session_id,
            incarnation=self._incarnation,
            attachment_generation=self._attachment,
            resume_token=self._resume_token if with_token else "",
            epoch=self._epoch,
            turn_id=self._turn_id,
            state="open",
            active_response_id=self._response.id if self._response else "",
            playback=cpb.Playback(),
            capabilities=self._capabilities,
        )

    async def _error(
        self,
        type_: str,
        code: str,
        message: str,
        event_id: str,
        param: str = "",
        *,
        client_type: str = "",
    ) -> None:
        self._metrics.errors.labels(code).inc()
        error = spb.ErrorEvent(
            type=type_,
            code=code,
            message=message,
            event_id=event_id,
            param=param,
            client_type=client_type,
        )
        await self._emit("error", error)

    async def _emit_all(self, events: list[Event]) -> None:
        for kind, msg in events:
            await self._emit(kind, msg)

    async def _emit(self, kind: str, msg: Any) -> None:
        """Journal, then send. An event the journal refused is never sent."""
        ev = spb.ServerEvent(seq=self._seq + 1, event_id=new_id("event"))
        getattr(ev, kind).CopyFrom(msg)
        try:
            with self._metrics.journal_latency.time():
                await self._store.append_event(
                    self.session_id, self.owner_token, ev.seq, ev.SerializeToString()
                )
        except NotOwnerError:
            self._stand_down()
            raise
        self._seq = ev.seq
        self._metrics.events.labels(kind).inc()
        if self._outbound is not None:
            self._outbound.put_nowait(ev)

    def snapshot(self) -> Snapshot:
        active = None
        if self._response is not None:
            active = self._response.response("in_progress")
        return Snapshot(
            session_id=self.session_id,
            incarnation=self._incarnation,
            config=self._config,
            seq=self._seq,
            epoch=self._epoch,
            turn_id=self._turn_id,
            attachment=self._attachment,
            last_item_id=self._last_item_id,
            token_hash=self._token_hash,
            active_response=active,
        )

    async def _persist(self) -> None:
        """Write the durable state a successor would need (fenced by the owner token)."""
        try:
            # Where its stage work runs, for operators (not needed to take over).
            bound: dict[str, bytes | str] = {
                "stage0": self._stage0.address,
                "stage1": self._stage1.address,
            }
            await self._store.set_fields(
                self.session_id, self.owner_token, self.snapshot().fields() | bound
            )
        except NotOwnerError:
            self._stand_down()
            raise


def item_events(previous: str, item: cpb.Item, *kinds: str) -> list[Event]:
    """One item's event under each of `kinds` (`item_added`, `item_created`, `item_done`)."""
    return [(kind, spb.ItemEvent(previous_item_id=previous, item=item)) for kind in kinds]
