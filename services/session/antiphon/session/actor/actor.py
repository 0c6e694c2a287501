"""The session actor: one per session, one mailbox, one writer of its events.

Client commands and stage results enter the same mailbox and are handled
one at a time, so wire order is mailbox order and no two handlers race on
session state. The actor is that loop and the session's life (open,
resume, detach, close, expiry, standing down, giving up when Redis stays
away), and it flushes once per drain: journal and snapshot in one round
trip. Every other job is a part (wired in wiring.py), each the one writer
of its facts: the configuration, the
attachment (which stream speaks for the client), the emitter (numbers,
journals, then sends every event), the stage links (epoch fence) and the
worker slots, the user's turns, listening, the response control, the
client's edits, and the routing of client commands and stage events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from opentelemetry import trace

from antiphon.common.ids import new_id
from antiphon.session.actor import errors, mail, wiring
from antiphon.session.actor.attachment import Outbound
from antiphon.session.actor.deadlines import Deadlines
from antiphon.session.actor.errors import Rejection
from antiphon.session.actor.journal import replay
from antiphon.session.config.current_config import CurrentConfig
from antiphon.session.metrics import SessionMetrics
from antiphon.session.settings import SessionSettings
from antiphon.session.stage.stage_links import Rebind
from antiphon.session.stage.stages import BindError, Binding
from antiphon.session.state.snapshot import Snapshot, resumes, token_hash
from antiphon.session.state.store import NotOwnerError, SessionStore, StoreUnavailable
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

log = logging.getLogger(__name__)
tracer = trace.get_tracer("antiphon.session")

# Mail handled before one flush at most: it bounds the events one round trip
# carries, and how long a drain keeps its first events unsent.
MAX_DRAIN = 64


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
        info: tuple[stage_pb2.StageInfo, stage_pb2.StageInfo],
        mailbox: mail.Mailbox,
        rebind: Rebind,
    ) -> None:
        sid = self.session_id = snapshot.session_id
        self.owner_token = owner_token
        self._incarnation = snapshot.incarnation
        self._config = CurrentConfig(
            sid,
            snapshot.config,
            max_output_tokens=settings.max_output_tokens,
            preemptive=settings.preemptive_answers,
        )
        self._token_hash = snapshot.token_hash
        self._resume_token = ""
        self._store = store
        self._settings = settings
        self._metrics = metrics
        # Created before the stage bindings, which post their results into it.
        self.mailbox = mailbox
        # The snapshot as last written: a flush writes it again only changed.
        self._persisted: dict[str, bytes | str] = {}
        # A response left open by a previous owner, to be ended on takeover.
        self._orphaned_response = snapshot.active_response
        self._deadlines = Deadlines(
            snapshot.created_ms,
            max_duration_s=settings.max_session_duration_s,
            idle_ttl_s=settings.idle_ttl_s,
        )
        self._closed = asyncio.Event()

        # The parts, each the one writer of its facts (see each module).
        parts = wiring.wire(
            snapshot=snapshot,
            owner_token=owner_token,
            store=store,
            settings=settings,
            metrics=metrics,
            config=self._config,
            stages=(stage0, stage1, info, rebind),
            on_not_owner=self._stand_down,
            state=self._state,
        )
        self._attachment = parts.attachment
        self._emitter = parts.emitter
        self._links = parts.links
        self._turns = parts.turns
        self._responses = parts.responses
        self._delegate = parts.delegate
        self._listening = parts.listening
        self._workers = parts.workers
        self._stage_events = parts.stage_events
        self._commands = parts.commands

    # ----------------------------------------------------------- outside
    def post(self, item: mail.Mail) -> None:
        self.mailbox.post(item)

    async def post_command(self, item: mail.Command) -> None:
        """Post a client command once the mailbox has room for one."""
        await self.mailbox.post_command(item)

    async def open(self, on_connect: bool) -> tuple[Outbound, int]:
        """Attach the new session's first stream: its outbound queue and generation."""
        return await self._ask(lambda answer: mail.Open(on_connect, answer))

    async def resume(self, request: spb.ResumeSession) -> tuple[Outbound, int]:
        """Attach a resuming stream; raises `Rejection` when refused."""
        return await self._ask(lambda answer: mail.Resume(request, answer))

    async def _ask(
        self, letter: Callable[[asyncio.Future[Any]], mail.Mail]
    ) -> tuple[Outbound, int]:
        """Post mail that answers: the actor settles the future in mailbox order."""
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.post(letter(answer))
        attached: tuple[Outbound, int] = await answer
        return attached

    def shutdown(self) -> None:
        """Drain on SIGTERM: after what it already holds, the actor hands the
        session on (see `_stand_down`)."""
        self.post(mail.Shutdown())

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def run(self) -> None:
        """Handle mail until the session closes: what waits in the mailbox is
        handled as one drain, its events journaled in one round trip."""
        try:
            while not self._closed.is_set():
                await self._handle_one(await self.mailbox.get())
                for _ in range(MAX_DRAIN - 1):
                    item = self.mailbox.get_nowait() if not self._closed.is_set() else None
                    if item is None:
                        break
                    await self._handle_one(item)
                await self._flush()
        finally:
            self._attachment.end()

    async def handle(self, item: mail.Mail) -> None:
        """One piece of mail as a drain of its own (tests call it directly)."""
        await self._handle_one(item)
        await self._flush()

    async def _handle_one(self, item: mail.Mail) -> None:
        try:
            await self._handle(item)
        except NotOwnerError:
            pass  # stood down: another replica carries the session on
        except StoreUnavailable:
            self._give_up()
        except Exception:
            log.exception("session handler failed", extra={"session_id": self.session_id})
            await self._emitter.error(
                spb.ErrorEvent(type="server_error", code="internal_error", message="internal error")
            )

    async def _flush(self) -> bool:
        """Journal what the drain made and write the snapshot if it changed
        (one round trip), then send the events. While Redis does not answer
        this waits, and the mailbox fills up to its bounds. False: the session
        is no longer this replica's to write (stood down, or given up)."""
        if self._closed.is_set():
            return False
        fields = self.snapshot().fields()
        # Where its stage work runs, for operators (not needed to take over).
        fields.update(self._links.addresses())
        changed = {k: v for k, v in fields.items() if self._persisted.get(k) != v}
        try:
            await self._emitter.flush(changed)
        except NotOwnerError:
            return False  # stood down (the emitter said so)
        except StoreUnavailable:
            self._give_up()
            return False
        self._persisted.update(changed)
        return True

    # ---------------------------------------------------------- dispatch
    async def _handle(self, item: mail.Mail) -> None:
        match item:
            case mail.Command(generation, cmd):
                if generation != self._attachment.generation:
                    # A write from a replaced attachment: refused, never applied.
                    self._metrics.stale_dropped.labels("attachment").inc()
                    return
                self._deadlines.touch()
                try:
                    await self._command(cmd)
                except Rejection as rejected:
                    await self._emitter.error(rejected.event(cmd.event_id))
            case mail.Open(on_connect, answer):
                await self._open(on_connect, answer)
            case mail.Resume(request, answer):
                await self._resume(request, answer)
            case mail.Recover():
                await self._recover()
            case mail.StageNews(stage, result):
                await self._stage_events.handle(stage, result)
            case mail.Tick():
                await self._tick()
            case mail.OwnershipLost():
                self._stand_down()
            case mail.Detached(generation):
                # The stream ended with no word from the client: its gateway died
                # or drained, and the client may come back through another.
                await self._detach(generation, "stream_lost")
            case mail.Shutdown():
                # Draining: hand the session on. The stream ends without a word;
                # the gateway resumes it on another replica.
                self._stand_down(notify=False)
            case mail.GraceExpired(generation):
                if self._attachment.expired(generation):
                    await self._expire("disconnect_grace_expired")

    async def _command(self, cmd: spb.ClientCommand) -> None:
        kind = cmd.WhichOneof("kind")
        self._metrics.commands.labels(kind or "none").inc()
        match kind:
            case "close":
                await self._close("session_close")
            case "client_gone":
                await self._client_gone(cmd.client_gone)
            case _:
                await self._commands.handle(cmd)

    # ------------------------------------------------------ attach, resume
    async def _open(self, on_connect: bool, answer: asyncio.Future[Any]) -> None:
        """A new session: attach its first stream, then announce it. Opened by
        a client's `session.update`, its `session.updated` follows; opened by
        the connection itself (`on_connect`), no update was asked for."""
        outbound, generation = self._attach()
        self._rotate_token()
        answer.set_result((outbound, generation))
        self._links.open()
        # Sent once the flush has written the snapshot (its token's hash) too.
        await self._emitter.emit("session_created", self._state(with_token=True))
        if not on_connect:
            await self._emitter.emit("session_updated", self._state())

    async def _resume(self, req: spb.ResumeSession, answer: asyncio.Future[Any]) -> None:
        """Re-attach on a new stream and replay what the client has not seen."""
        if not resumes(req, self._incarnation, self._token_hash):
            answer.set_exception(errors.resume_refused())
            return
        if self._attachment.detached:
            try:
                await self._links.bind_released()
            except BindError as exc:
                # Still detached, holding no slot: the client may try again
                # until its grace period ends.
                self._metrics.sessions_refused.labels(exc.refused_reason).inc()
                answer.set_exception(Rejection.unbound(exc))
                return
        # The old stream gets what this drain made so far; the new one gets
        # it from the journal. The new token is written before the client has it.
        if not await self._flush():
            answer.set_exception(errors.resume_refused())
            return
        outbound, generation = self._attach()
        self._rotate_token()
        if not await self._flush():
            answer.set_exception(errors.resume_refused())
            return
        self._metrics.resumes.inc()
        resumed = spb.SessionResumed(
            session_id=self.session_id,
            incarnation=self._incarnation,
            attachment_generation=generation,
            resume_token=self._resume_token,
            session=self._state(),
        )
        cursor = req.last_received_seq
        journal = await self._store.journal_since(self.session_id, cursor)
        if not replay(outbound, resumed, cursor, journal):
            self._attachment.end()
        answer.set_result((outbound, generation))

    def _attach(self) -> tuple[Outbound, int]:
        outbound, generation, replaced = self._attachment.attach(self._emitter.seq)
        if replaced:
            self._metrics.takeovers.labels("attachment").inc()
        self._deadlines.touch()
        return outbound, generation

    def _rotate_token(self) -> None:
        self._resume_token = new_id("rt")
        self._token_hash = token_hash(self._resume_token)

    async def _recover(self) -> None:
        """Taken over: bind the stages again and end what the old owner left open."""
        self._links.open()
        orphan, self._orphaned_response = self._orphaned_response, None
        if orphan is not None:
            # Its stage work died with the old owner: end it, never leave it open.
            orphan.status = "failed"
            orphan.status_reason = "session_owner_changed"
            del orphan.output[:]
            await self._emitter.emit("response_done", spb.ResponseEvent(response=orphan))
            await self._emitter.emit("rate_limits_updated", spb.RateLimitsUpdated())

    # --------------------------------------------------------- detaching
    async def _client_gone(self, gone: spb.ClientGone) -> None:
        """The client's socket closed. A goodbye ends the session at once
        (its admission and stage slots free for the next client), unless the
        session is resumable; anything else only detaches it."""
        log.info(
            "client gone",
            extra={"session_id": self.session_id, "clean": gone.clean, "code": gone.close_code},
        )
        if gone.clean and not self._config.now.resumable:
            await self._close("client_closed")
        else:
            how = "resumable_close" if gone.clean else "dropped"
            await self._detach(self._attachment.generation, how)

    async def _detach(self, generation: int, how: str) -> None:
        """No stream is attached: resumable for `disconnect_grace_s`, with no
        stage worker slot held meanwhile (a resume binds again)."""
        if self._closed.is_set() or not self._attachment.detach(
            generation,
            self._settings.disconnect_grace_s,
            lambda g: self.post(mail.GraceExpired(g)),
        ):
            return  # a replaced stream, or already detached by the client's word
        self._metrics.detached.labels(how).inc()
        await self._release_stages()

    async def _release_stages(self) -> None:
        """Give the stage workers' slots back. What needs them ends first: a
        response in flight (`cancelled`, `client_disconnected`; as far as it
        was sent it enters history, as any cancelled answer does) and the
        uncommitted input. A committed turn stage0 still owes a transcript
        keeps stage0 until it is heard, so the user's last words are kept."""
        self._responses.drop_deferred()
        if self._responses.active is not None:
            await self._responses.cancel_active("client_disconnected")
        await self._listening.let_go()
        await self._workers.let_go(keep_stage0=self._listening.owes_transcripts)

    # ----------------------------------------------------------- closing
    async def _close(self, reason: str) -> None:
        """The client ended the session: `session.close`, or a clean close of
        its socket (`client_closed`) when the session is not resumable."""
        self._metrics.closed.labels(reason).inc()
        if self._responses.active is not None:
            await self._responses.cancel_active("session_closed")
        await self._emitter.emit(
            "session_closed", spb.SessionClosed(session_id=self.session_id, reason=reason)
        )
        await self._cleanup()

    async def _expire(self, reason: str) -> None:
        """A lease ran out: `session.expired`, then the same cleanup as a close."""
        if self._responses.active is not None:
            await self._responses.cancel_active(reason)
        self._metrics.expired.labels(reason).inc()
        expired = spb.SessionExpired(
            session_id=self.session_id, incarnation=self._incarnation, reason=reason
        )
        await self._emitter.emit("session_expired", expired)
        await self._cleanup()

    async def _cleanup(self) -> None:
        """Release what the session holds; its admission slot goes last, so a
        closing session keeps its capacity until cleanup has really finished
        (a failure here leaves the slot to the reaper, which retries)."""
        if not await self._flush():
            return  # another replica's now, or Redis gone: not ours to clean
        self._closed.set()
        await self._links.close()
        await self._delegate.close()
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
        self._emitter.drop_held()
        self._attachment.stop(self._emitter.journaled_seq, notify=notify)
        self._links.close_soon()
        self._delegate.let_go()

    def _give_up(self) -> None:
        """Redis did not answer for `store_outage_max_s`: nothing more can be
        journaled, so nothing more is sent. The client is told to start over
        (`session.resync_required`, reason `session_store_unavailable`); the
        events held unsent go, the session's keys stay for the reaper once
        Redis is back, and this replica holds nothing of it any more."""
        if self._closed.is_set():
            return
        dropped = self._emitter.drop_held()
        log.error(
            "session store unavailable: giving the session up",
            extra={"session_id": self.session_id, "events_dropped": dropped},
        )
        self._metrics.store_unavailable.inc()
        self._closed.set()
        self._attachment.resync(self._emitter.journaled_seq, "session_store_unavailable")
        self._links.close_soon()
        self._delegate.let_go()

    async def _tick(self) -> None:
        """The registry's periodic check: stages to rebind, then the deadlines."""
        await self._workers.retry_unbound()
        reason = self._deadlines.passed()
        if reason is not None:
            await self._expire(reason)

    # ------------------------------------------------------------- state
    def _state(self, *, with_token: bool = False) -> spb.SessionState:
        active = self._responses.active
        return spb.SessionState(
            config=self._config.now,
            session_id=self.session_id,
            incarnation=self._incarnation,
            attachment_generation=self._attachment.generation,
            resume_token=self._resume_token if with_token else "",
            epoch=self._links.epoch,
            turn_id=self._turns.turn_id,
            state="open",
            active_response_id=active.id if active else "",
            playback=cpb.Playback(),
            capabilities=self._links.capabilities,
            expires_at=self._deadlines.expires_at_s,
        )

    def snapshot(self) -> Snapshot:
        """The durable state, gathered from the part that owns each fact."""
        return Snapshot(
            session_id=self.session_id,
            incarnation=self._incarnation,
            config=self._config.now,
            seq=self._emitter.seq,
            epoch=self._links.epoch,
            turn_id=self._turns.turn_id,
            attachment=self._attachment.generation,
            last_item_id=self._turns.last_item_id,
            token_hash=self._token_hash,
            active_response=self._responses.orphan_record(),
        )
