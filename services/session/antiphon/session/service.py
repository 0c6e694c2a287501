"""The gRPC face of the session service: one `Connect` stream per connection.

The first command opens the session (admission, config, stage bindings);
the rest go into the session actor's mailbox in the order they arrived.
Events flow back from the actor's outbound queue; a dropped stream only
detaches the connection, the session lives on for its grace period.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from opentelemetry import trace

from antiphon.common import tracing
from antiphon.common.ids import new_id, valid_session_id
from antiphon.session import session_config
from antiphon.session.actor import Mail, SessionActor
from antiphon.session.metrics import SessionMetrics
from antiphon.session.settings import SessionSettings
from antiphon.session.stages import NoWorkerError, StagePool
from antiphon.session.store import SessionStore
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import session_pb2_grpc

log = logging.getLogger(__name__)
tracer = trace.get_tracer("antiphon.session")


class Refused(Exception):
    def __init__(self, type_: str, code: str, message: str, param: str = "") -> None:
        super().__init__(message)
        self.event = spb.ErrorEvent(type=type_, code=code, message=message, param=param)


class SessionService(session_pb2_grpc.SessionServiceServicer):
    def __init__(
        self,
        *,
        settings: SessionSettings,
        store: SessionStore,
        pool: StagePool,
        metrics: SessionMetrics,
    ) -> None:
        self._settings = settings
        self._store = store
        self._pool = pool
        self._metrics = metrics
        self._actors: dict[str, SessionActor] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def Connect(
        self,
        request_iterator: AsyncIterator[spb.ClientCommand],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[spb.ServerEvent]:
        parent = tracing.extract_metadata(context.invocation_metadata())
        commands = aiter(request_iterator)
        first = await anext(commands, None)
        if first is None:
            return
        with tracer.start_as_current_span("session.open", context=parent):
            try:
                actor = await self._open(first)
            except Refused as refused:
                refused.event.event_id = first.event_id
                # No session exists, so nothing is journaled: seq 0 marks it.
                yield spb.ServerEvent(seq=0, event_id=new_id("event"), error=refused.event)
                return
        outbound, generation = actor.attach()
        # First in the mailbox: session.created precedes every other event.
        actor.post("start", None)
        pump = asyncio.create_task(self._pump(commands, actor))
        try:
            while (event := await outbound.get()) is not None:
                yield event
        finally:
            pump.cancel()
            actor.post("detached", generation)

    async def _pump(self, commands: AsyncIterator[spb.ClientCommand], actor: SessionActor) -> None:
        try:
            async for cmd in commands:
                actor.post("cmd", cmd)
        except (asyncio.CancelledError, grpc.aio.AioRpcError):
            pass

    async def _open(self, first: spb.ClientCommand) -> SessionActor:
        if first.WhichOneof("kind") != "open":
            raise Refused(
                "invalid_request_error",
                "session_not_open",
                "the first event must be session.update (the open handshake)",
            )
        patch = first.open.config
        session_id = patch.session_id if patch.HasField("session_id") else new_id("sess")
        if not valid_session_id(session_id):
            raise Refused(
                "invalid_request_error",
                "invalid_value",
                "session_id must be 1-128 characters of A-Z a-z 0-9 _ . : -",
                "session.session_id",
            )
        live = self._actors.get(session_id)
        if live is not None and not live.closed:
            raise Refused(
                "invalid_request_error", "session_already_open", f"session {session_id} is open"
            )
        try:
            config = session_config.merge(
                session_config.defaults(patch.model or "antiphon-cascade"),
                patch,
                max_output_tokens=self._settings.max_output_tokens,
            )
        except session_config.ConfigError as exc:
            raise Refused("invalid_request_error", exc.code, str(exc), exc.param) from exc
        if not await self._store.admit(session_id, self._settings.max_sessions):
            self._metrics.sessions_refused.labels("capacity").inc()
            raise Refused(
                "rate_limit_error",
                "duplex_session_busy",
                f"duplex session capacity reached (max_sessions={self._settings.max_sessions})",
            )
        mailbox: asyncio.Queue[Mail] = asyncio.Queue()
        try:
            stage0, info0 = await self._pool.bind_stage0(
                lambda ev: mailbox.put_nowait(("stage0", ev))
            )
            stage1, _info1 = await self._pool.bind_stage1(
                lambda ev: mailbox.put_nowait(("stage1", ev))
            )
        except (NoWorkerError, grpc.aio.AioRpcError) as exc:
            await self._store.release(session_id)
            self._metrics.sessions_refused.labels("no_worker").inc()
            raise Refused("server_error", "stage_unavailable", str(exc)) from exc
        token = new_id("own")
        opened = await self._store.open(
            session_id, token, {"config": config.SerializeToString(), "state": "open"}
        )
        caps = cpb.Capabilities()
        caps.CopyFrom(info0.capabilities)
        actor = SessionActor(
            session_id=session_id,
            token=token,
            incarnation=opened.incarnation,
            config=config,
            capabilities=caps,
            store=self._store,
            settings=self._settings,
            metrics=self._metrics,
            stage0=stage0,
            stage1=stage1,
            mailbox=mailbox,
        )
        self._actors[session_id] = actor
        self._metrics.sessions_admitted.inc()
        self._metrics.sessions_active.inc()
        task = asyncio.create_task(self._run(actor))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        log.info("session opened", extra={"session_id": session_id, "stage0": stage0.address})
        return actor

    async def _run(self, actor: SessionActor) -> None:
        try:
            await actor.run()
        finally:
            self._metrics.sessions_active.dec()
            if self._actors.get(actor.session_id) is actor:
                del self._actors[actor.session_id]
            log.info("session ended", extra={"session_id": actor.session_id})

    async def drain(self) -> None:
        """Close every session this replica owns (SIGTERM)."""
        for actor in list(self._actors.values()):
            actor.shutdown()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=self._settings.shutdown_grace_s)
