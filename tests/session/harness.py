"""One session actor on a real Redis, its stage workers recorded.

The actor and every part it builds are real; the far side of each stage
link (a worker's gRPC stream) is a `Recording` that keeps what it was sent,
and the test posts what a worker would answer as mail. Mail is handled by
`actor.handle`, the loop's own step, so each test reads the result of one
piece of mail at a time, with no task to wait for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from antiphon.session.actor import mail
from antiphon.session.actor.actor import SessionActor
from antiphon.session.actor.attachment import Outbound
from antiphon.session.config import session_config
from antiphon.session.metrics import SessionMetrics
from antiphon.session.settings import SessionSettings
from antiphon.session.stage.stages import Binding, StageResult, StreamEnded
from antiphon.session.state.snapshot import Snapshot
from antiphon.session.state.store import SessionStore
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.support.bindings import Recording
from tests.support.redis_dbs import db_url

SID, OWNER = "sess_h", "own_h"
MANUAL = cpb.SessionConfigPatch(has_turn_detection=True)  # push-to-talk: no VAD, no auto answer


@dataclass
class Workers:
    """The stage workers the session may bind: each bind is a new recording;
    `refuse` makes the next binds of a stage fail."""

    info0: stage_pb2.StageInfo = field(default_factory=stage_pb2.StageInfo)
    info1: stage_pb2.StageInfo = field(default_factory=stage_pb2.StageInfo)
    bound: dict[str, list[Recording]] = field(default_factory=lambda: {"stage0": [], "stage1": []})
    refuse: set[str] = field(default_factory=set)

    def bind(self, stage: str) -> Recording:
        binding = Recording(f"{stage}:{len(self.bound[stage]) + 1}")
        self.bound[stage].append(binding)
        return binding

    async def rebind(self, stage: str, failed: str) -> tuple[Binding[Any], stage_pb2.StageInfo]:
        if stage in self.refuse:
            raise RuntimeError(f"no {stage} worker")
        info = self.info0 if stage == "stage0" else self.info1
        return cast(Binding[Any], self.bind(stage)), info

    def now(self, stage: str) -> Recording:
        """The stage's latest binding."""
        return self.bound[stage][-1]


@dataclass
class Session:
    actor: SessionActor
    store: SessionStore
    workers: Workers
    registry: CollectorRegistry
    outbound: Outbound | None = None
    generation: int = 0
    seen: list[spb.ServerEvent] = field(default_factory=list)

    async def attach(self, on_connect: bool = False) -> None:
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.actor.handle(mail.Open(on_connect, answer))
        self.outbound, self.generation = answer.result()

    async def command(self, **kind: Any) -> None:
        await self.actor.handle(mail.Command(self.generation, spb.ClientCommand(**kind)))

    async def stage0(self, **kind: Any) -> None:
        """Stage0's current worker sends an event."""
        binding = self.workers.now("stage0")
        news = StageResult(cast(Binding[Any], binding), stage_pb2.Stage0Event(**kind))
        await self.actor.handle(mail.StageNews("stage0", news))

    async def stage1(self, **kind: Any) -> None:
        binding = self.workers.now("stage1")
        news = StageResult(cast(Binding[Any], binding), stage_pb2.Stage1Event(**kind))
        await self.actor.handle(mail.StageNews("stage1", news))

    async def lose(self, stage: str) -> None:
        """The stage's current worker dies: its stream ends."""
        binding = cast(Binding[Any], self.workers.now(stage))
        await self.actor.handle(mail.StageNews(stage, StreamEnded(binding)))

    def events(self) -> list[spb.ServerEvent]:
        """The events sent to the attached stream since the last call (None: its end)."""
        out: list[spb.ServerEvent] = []
        while self.outbound is not None and not self.outbound.empty():
            event = self.outbound.get_nowait()
            if event is None:
                self.outbound = None
                break
            out.append(event)
        self.seen += out
        return out

    def kinds(self) -> list[str]:
        return [e.WhichOneof("kind") or "" for e in self.events()]

    def sent0(self, kind: str) -> list[Any]:
        """What every stage0 binding was sent of `kind`, in order."""
        return [
            getattr(r, kind)
            for b in self.workers.bound["stage0"]
            for r in b.sent
            if r.WhichOneof("kind") == kind
        ]

    def sent1(self, kind: str) -> list[Any]:
        return [
            getattr(r, kind)
            for b in self.workers.bound["stage1"]
            for r in b.sent
            if r.WhichOneof("kind") == kind
        ]

    def count(self, metric: str, **labels: str) -> float:
        value = self.registry.get_sample_value(metric, labels or None)
        return value or 0.0

    async def history(self) -> list[cpb.Item]:
        return [cpb.Item.FromString(raw) for raw in await self.store.history(SID)]


@asynccontextmanager
async def session(
    redis_url: str,
    db: int,
    *,
    patch: cpb.SessionConfigPatch | None = None,
    workers: Workers | None = None,
    snapshot: Callable[[Snapshot], None] = lambda s: None,
    **settings: Any,
) -> AsyncIterator[Session]:
    """A session opened in Redis database `db` (flushed first), its actor
    built as the registry builds it, not yet attached."""
    client = aioredis.from_url(db_url(redis_url, db))
    await client.flushdb()
    service_settings = SessionSettings(max_output_tokens=64, **settings)
    store = SessionStore(
        client,
        lease_ms=5000,
        journal_max_bytes=1 << 20,
        journal_ttl_s=60.0,
        ops_cache_size=8,
        outage_s=service_settings.store_outage_max_s,
    )
    config = session_config.merge(
        session_config.defaults(), patch or cpb.SessionConfigPatch(), max_output_tokens=64
    )
    await store.admit(SID, 4, OWNER)
    opened = await store.open(SID, OWNER, {"config": config.SerializeToString(), "state": "open"})
    registry = CollectorRegistry()
    metrics = SessionMetrics(registry)
    workers = workers or Workers()
    snap = Snapshot(
        session_id=SID,
        incarnation=opened.incarnation,
        config=config,
        created_ms=int(time.time() * 1000),
    )
    snapshot(snap)
    actor = SessionActor(
        snapshot=snap,
        owner_token=OWNER,
        store=store,
        settings=service_settings,
        metrics=metrics,
        stage0=cast(Binding[Any], workers.bind("stage0")),
        stage1=cast(Binding[Any], workers.bind("stage1")),
        info=(workers.info0, workers.info1),
        mailbox=mail.Mailbox(max_commands=256, max_stage_results=256),
        rebind=workers.rebind,
    )
    try:
        yield Session(actor, store, workers, registry)
    finally:
        await client.aclose()
