"""The sessions this replica owns: opening, resuming, taking over, leases, reaping.

Ownership is a lease in Redis (`ap:{sid}:owner` = this replica's token for
the session, with a TTL). The registry renews the leases of its actors; an
actor whose lease was taken stands down. A resume for a session this
replica does not own takes it over (the previous owner may be dead or
alive: its next fenced write fails). Sessions whose owner vanished and that
nobody resumed within the grace period are reaped by any replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Protocol

import grpc

from antiphon.common.ids import new_id, valid_session_id
from antiphon.session.actor import errors, mail
from antiphon.session.actor.actor import SessionActor
from antiphon.session.actor.attachment import Outbound
from antiphon.session.actor.errors import Rejection
from antiphon.session.config import session_config
from antiphon.session.metrics import SessionMetrics
from antiphon.session.settings import SessionSettings
from antiphon.session.stage.stages import BindError, Binding, OnEvent
from antiphon.session.state.snapshot import Snapshot, resumes
from antiphon.session.state.store import SessionStore
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

log = logging.getLogger(__name__)

# What a stream attached to a session gets: the session's actor, the queue
# of events for the stream, and the attachment's generation (its fence).
Attached = tuple[SessionActor, Outbound, int]


class Stages(Protocol):
    """The stage workers sessions bind to (`stages.StagePool`); each bind
    raises `BindError` when no worker takes the session."""

    async def bind_stage0(
        self, on_event: OnEvent, *, avoid: str = ""
    ) -> tuple[Binding[stage_pb2.Stage0Request], stage_pb2.StageInfo]: ...

    async def bind_stage1(
        self, on_event: OnEvent, *, avoid: str = ""
    ) -> tuple[Binding[stage_pb2.Stage1Request], stage_pb2.StageInfo]: ...

    async def bind_delegate(
        self, on_event: OnEvent
    ) -> tuple[Binding[stage_pb2.Stage0Request], stage_pb2.StageInfo]: ...


class SessionRegistry:
    def __init__(
        self,
        *,
        settings: SessionSettings,
        store: SessionStore,
        pool: Stages,
        metrics: SessionMetrics,
    ) -> None:
        self._settings = settings
        self._store = store
        self._pool = pool
        self._metrics = metrics
        self._actors: dict[str, SessionActor] = {}
        # When this replica first saw each admitted session with no owner (monotonic).
        self._ownerless_since: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # --------------------------------------------------------------- open
    async def open(self, cmd: spb.ClientCommand) -> Attached:
        patch = cmd.open.config
        session_id = patch.session_id if patch.HasField("session_id") else new_id("sess")
        if not valid_session_id(session_id):
            raise Rejection(
                "invalid_request_error",
                "invalid_value",
                "session_id must be 1-128 characters of A-Z a-z 0-9 _ . : -",
                "session.session_id",
            )
        live = self._actors.get(session_id)
        owned_elsewhere = (await self._store.fields(session_id)).get(
            b"state"
        ) == b"open" and await self._store.owner_alive(session_id)
        if (live is not None and not live.closed) or owned_elsewhere:
            raise Rejection(
                "invalid_request_error", "session_already_open", f"session {session_id} is open"
            )
        try:
            config = session_config.merge(
                session_config.defaults(patch.model or session_config.DEFAULT_MODEL),
                patch,
                max_output_tokens=self._settings.max_output_tokens,
            )
        except session_config.ConfigError as exc:
            raise Rejection("invalid_request_error", exc.code, str(exc), exc.param) from exc
        token = new_id("own")
        if not await self._store.admit(session_id, self._settings.max_sessions, token):
            self._metrics.sessions_refused.labels("capacity").inc()
            raise Rejection(
                "rate_limit_error",
                "duplex_session_busy",
                f"duplex session capacity reached (max_sessions={self._settings.max_sessions})",
            )
        created_ms = int(time.time() * 1000)
        try:
            opened = await self._store.open(
                session_id,
                token,
                {
                    "config": config.SerializeToString(),
                    "state": "open",
                    # Which replica owns it: for operators (and the benchmarks).
                    "replica": self._settings.listen,
                    "created_ms": str(created_ms),
                },
            )
            snapshot = Snapshot(
                session_id=session_id,
                incarnation=opened.incarnation,
                config=config,
                created_ms=created_ms,
            )
            actor = await self._start_actor(snapshot, token)
        except BaseException:
            await self._store.release(session_id)
            raise
        self._metrics.sessions_admitted.inc()
        outbound, generation = await actor.open(cmd.open.on_connect)
        log.info("session opened", extra={"session_id": session_id})
        return actor, outbound, generation

    # ------------------------------------------------------------- resume
    async def resume(self, cmd: spb.ResumeSession) -> Attached:
        actor = self._actors.get(cmd.session_id)
        if (
            actor is not None
            and not actor.closed
            and not await self._store.refresh_lease(actor.session_id, actor.owner_token)
        ):
            # Another replica resumed it while this copy sat detached, and this
            # copy would learn so only at its next lease renewal: its token is
            # stale, so it would refuse the client's current one.
            actor.post(mail.OwnershipLost())
            actor = None
        if actor is None or actor.closed:
            actor = await self._take_over(cmd)
        outbound, generation = await actor.resume(cmd)
        return actor, outbound, generation

    async def _take_over(self, cmd: spb.ResumeSession) -> SessionActor:
        """Rebuild a session this replica does not own from Redis, and own it."""
        expired = Rejection(
            "invalid_request_error",
            "session_resume_expired",
            f"Unknown or expired duplex session: {cmd.session_id}",
            "session_id",
        )
        raw = await self._store.fields(cmd.session_id) if valid_session_id(cmd.session_id) else {}
        if not raw or raw.get(b"state") != b"open":
            raise expired
        snapshot = Snapshot.from_fields(cmd.session_id, raw)
        # Check before taking anything: a wrong token must change nothing.
        if not resumes(cmd, snapshot.incarnation, snapshot.token_hash):
            raise errors.resume_refused()
        token = new_id("own")
        if not await self._store.take_over(cmd.session_id, token):
            raise expired
        await self._store.set_fields(cmd.session_id, token, {"replica": self._settings.listen})
        # Re-read under our ownership: the old owner may have written since.
        snapshot = Snapshot.from_fields(cmd.session_id, await self._store.fields(cmd.session_id))
        actor = await self._start_actor(snapshot, token)
        actor.post(mail.Recover())
        self._metrics.takeovers.labels("replica").inc()
        log.info("session taken over", extra={"session_id": cmd.session_id})
        return actor

    async def _start_actor(self, snapshot: Snapshot, token: str) -> SessionActor:
        mailbox = mail.Mailbox(
            max_commands=self._settings.max_pending_commands,
            max_stage_results=self._settings.max_pending_stage_results,
            waited=self._metrics.stage_results_waited,
        )

        def poster(stage: str) -> OnEvent:
            return lambda result: mailbox.post_stage(stage, result)

        try:
            stage0, info0 = await self._pool.bind_stage0(poster("stage0"))
            try:
                stage1, info1 = await self._pool.bind_stage1(poster("stage1"))
            except BaseException:
                await stage0.close()  # its slot on the stage0 worker
                raise
        except BindError as exc:
            self._metrics.sessions_refused.labels(exc.refused_reason).inc()
            raise Rejection.unbound(exc) from exc
        except grpc.aio.AioRpcError as exc:
            self._metrics.sessions_refused.labels("no_worker").inc()
            raise Rejection("server_error", "stage_unavailable", str(exc)) from exc

        async def rebind(stage: str, failed: str) -> tuple[Binding[Any], stage_pb2.StageInfo]:
            """A binding to a worker of `stage` other than `failed` ("": any);
            raises BindError. After a worker died, and on resuming a detached session;
            and a delegate's LLM for one delegated answer (assistant/delegate.py)."""
            if stage == "delegate":
                return await self._pool.bind_delegate(poster("delegate"))
            if stage == "stage0":
                return await self._pool.bind_stage0(poster("stage0"), avoid=failed)
            return await self._pool.bind_stage1(poster("stage1"), avoid=failed)

        actor = SessionActor(
            snapshot=snapshot,
            owner_token=token,
            store=self._store,
            settings=self._settings,
            metrics=self._metrics,
            stage0=stage0,
            stage1=stage1,
            info=(info0, info1),
            mailbox=mailbox,
            rebind=rebind,
        )
        self._actors[snapshot.session_id] = actor
        self._metrics.sessions_active.inc()
        task = asyncio.create_task(self._run(actor))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return actor

    async def _run(self, actor: SessionActor) -> None:
        try:
            await actor.run()
        finally:
            self._metrics.sessions_active.dec()
            if self._actors.get(actor.session_id) is actor:
                del self._actors[actor.session_id]
            log.info("session ended here", extra={"session_id": actor.session_id})

    # -------------------------------------------------------- maintenance
    async def maintain(self) -> None:
        """Renew leases every third of their length; tick actors and reap orphans."""
        interval = self._settings.owner_lease_s / 3
        last_reap = 0.0
        while True:
            await asyncio.sleep(interval)
            actors = list(self._actors.values())
            try:
                renewed = await self._store.refresh_leases(
                    [(a.session_id, a.owner_token) for a in actors]
                )
            except Exception:
                # Redis away: the actors carry on, and renewal is retried next round.
                log.warning("lease renewal failed", exc_info=True)
                renewed = [True] * len(actors)
            for actor, ok in zip(actors, renewed, strict=True):
                actor.post(mail.Tick() if ok else mail.OwnershipLost())
            if time.monotonic() - last_reap >= self._settings.reaper_interval_s:
                last_reap = time.monotonic()
                with contextlib.suppress(Exception):
                    await self.reap()

    async def reap(self) -> int:
        """End admitted sessions whose owner vanished and that nobody resumed in time."""
        reaped = 0
        # An owner's death is only known once its lease lapses: the grace
        # period runs from then, so a gateway failing its client over to
        # another replica has the whole of it.
        grace_ms = (self._settings.disconnect_grace_s + self._settings.owner_lease_s) * 1000
        admitted = await self._store.admitted()
        seen = self._ownerless_since
        for session_id in set(seen) - set(admitted):
            del seen[session_id]
        for session_id in admitted:
            if session_id in self._actors or await self._store.owner_alive(session_id):
                seen.pop(session_id, None)
                continue
            raw = await self._store.fields(session_id)
            if raw.get(b"state") == b"open":
                alive_ms = int(raw.get(b"alive_ms") or 0)
                if time.time() * 1000 - alive_ms < grace_ms:
                    continue  # its client may still resume it elsewhere
                # After a Redis stall every lease has lapsed and no owner has
                # written since: a live one renews within a third of a lease
                # of Redis answering again. Only one that stays away for a
                # whole lease, as this replica sees it, is dead.
                first_seen = seen.setdefault(session_id, time.monotonic())
                if time.monotonic() - first_seen < self._settings.owner_lease_s:
                    continue
                if not await self._store.claim_orphan(session_id, new_id("reaper")):
                    continue
                await self._store.expire(session_id, self._settings.resume_replay_ttl_s)
            seen.pop(session_id, None)
            # Closed, expired or gone: the slot was only kept for a cleanup
            # that did not finish.
            await self._store.release(session_id)
            self._metrics.expired.labels("owner_lost").inc()
            reaped += 1
        return reaped

    async def drain(self) -> None:
        """SIGTERM: stop renewing and let each actor stand down, so that the
        sessions' clients resume them on another replica (their leases
        lapse, or a resume takes them over at once)."""
        for actor in list(self._actors.values()):
            actor.shutdown()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=self._settings.shutdown_grace_s)
