"""The session registry over a real Redis and real actors: who is admitted or
refused and what each costs, what a caller is handed, takeover, lease loss,
reaping and drain. The stage workers are the far side: a fake pool of
recording bindings."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import grpc
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from antiphon.session.actor.attachment import Outbound
from antiphon.session.actor.errors import Rejection
from antiphon.session.metrics import SessionMetrics
from antiphon.session.registry import SessionRegistry
from antiphon.session.settings import SessionSettings
from antiphon.session.stage.stages import Binding, OnEvent, WorkerFullError
from antiphon.session.state import keys
from antiphon.session.state.store import SessionStore
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.support.bindings import Recording
from tests.support.polling import eventually
from tests.support.redis_dbs import flushed

DB = 6  # this module's own database on the shared test Redis


class Pool:
    """Stage workers that bind every session, or fail the way they are told to."""

    def __init__(self) -> None:
        self.bound: list[Recording] = []
        self.fail: dict[str, BaseException] = {}

    async def bind_stage0(
        self, on_event: OnEvent, *, avoid: str = ""
    ) -> tuple[Binding[stage_pb2.Stage0Request], stage_pb2.StageInfo]:
        return self._bind("stage0"), stage_pb2.StageInfo()

    async def bind_stage1(
        self, on_event: OnEvent, *, avoid: str = ""
    ) -> tuple[Binding[stage_pb2.Stage1Request], stage_pb2.StageInfo]:
        return self._bind("stage1"), stage_pb2.StageInfo()

    async def bind_delegate(
        self, on_event: OnEvent
    ) -> tuple[Binding[stage_pb2.Stage0Request], stage_pb2.StageInfo]:
        return self._bind("delegate"), stage_pb2.StageInfo()

    def _bind(self, stage: str) -> Binding[Any]:
        if stage in self.fail:
            raise self.fail[stage]
        binding = Recording(f"{stage}:1")
        self.bound.append(binding)
        return cast(Binding[Any], binding)


class Replica:
    """One session replica's registry, with what it was built from."""

    def __init__(self, client: aioredis.Redis, name: str, **limits: Any) -> None:
        self.settings = SessionSettings(listen=name, **limits)
        self.store = SessionStore(
            client,
            lease_ms=int(self.settings.owner_lease_s * 1000),
            journal_max_bytes=1 << 20,
            journal_ttl_s=60,
            ops_cache_size=4,
        )
        self.pool = Pool()
        self.metrics = SessionMetrics(CollectorRegistry())
        self.registry = SessionRegistry(
            settings=self.settings, store=self.store, pool=self.pool, metrics=self.metrics
        )

    def count(self, name: str, *labels: str) -> float:
        metric = getattr(self.metrics, name)
        value: float = (metric.labels(*labels) if labels else metric)._value.get()
        return value


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    async with flushed(redis_url, DB) as client:
        yield client


@pytest.fixture
async def replicas(client: aioredis.Redis) -> AsyncIterator[Callable[..., Replica]]:
    """Replicas on the test's Redis; each drains at the end, so no actor
    outlives its test."""
    made: list[Replica] = []

    def replica(name: str = "replica-a:1", **limits: Any) -> Replica:
        made.append(Replica(client, name, **{"max_sessions": 4, **limits}))
        return made[-1]

    yield replica
    for r in made:
        await r.registry.drain()


def opening(session_id: str = "", *, on_connect: bool = False, **patch: Any) -> spb.ClientCommand:
    config = cpb.SessionConfigPatch(**patch)
    if session_id:
        config.session_id = session_id
    return spb.ClientCommand(open=spb.OpenSession(config=config, on_connect=on_connect))


async def next_events(outbound: Outbound, n: int) -> list[spb.ServerEvent]:
    events = []
    for _ in range(n):
        ev = await asyncio.wait_for(outbound.get(), 2)
        assert ev is not None
        events.append(ev)
    return events


# ------------------------------------------------------------------- open
async def test_an_admitted_session_is_handed_over_attached_and_announced(
    replicas: Callable[..., Replica], client: aioredis.Redis
) -> None:
    a = replicas()
    actor, outbound, generation = await a.registry.open(opening("sess_1"))
    assert actor.session_id == "sess_1" and not actor.closed and generation == 1
    created, updated = await next_events(outbound, 2)
    assert created.session_created.session_id == "sess_1" and created.session_created.resume_token
    assert updated.WhichOneof("kind") == "session_updated"
    fields = await client.hgetall(keys.session("sess_1"))  # type: ignore[misc]
    assert fields[b"state"] == b"open" and fields[b"replica"] == b"replica-a:1"
    assert await client.smembers(keys.ADMITTED) == {b"sess_1"}  # type: ignore[misc]
    assert a.count("sessions_admitted") == 1 and a.count("sessions_active") == 1
    # Both stages were bound, and told the session is open.
    assert [b.address for b in a.pool.bound] == ["stage0:1", "stage1:1"]
    assert all(b.sent for b in a.pool.bound)


async def test_a_session_opened_on_connect_is_announced_without_an_update(
    replicas: Callable[..., Replica],
) -> None:
    _, outbound, _ = await replicas().registry.open(opening(on_connect=True))
    (created,) = await next_events(outbound, 1)
    assert created.session_created.session_id.startswith("sess")
    assert outbound.empty()


async def test_past_max_sessions_a_session_is_refused_and_holds_nothing(
    replicas: Callable[..., Replica], client: aioredis.Redis
) -> None:
    a = replicas(max_sessions=1)
    await a.registry.open(opening("sess_1"))
    with pytest.raises(Rejection) as refused:
        await a.registry.open(opening("sess_2"))
    assert (refused.value.type, refused.value.code) == ("rate_limit_error", "duplex_session_busy")
    assert "max_sessions=1" in refused.value.message
    assert a.count("sessions_refused", "capacity") == 1 and a.count("sessions_admitted") == 1
    assert not await client.exists(keys.session("sess_2"))
    assert len(a.pool.bound) == 2  # no stage slot taken for the refused one


@pytest.mark.parametrize(
    ("session_id", "patch", "code", "param"),
    [
        ("bad id!", {}, "invalid_value", "session.session_id"),
        ("sess_1", {"temperature": 3.0}, "invalid_value", "temperature"),
    ],
)
async def test_an_invalid_open_is_refused_before_admission(
    replicas: Callable[..., Replica],
    client: aioredis.Redis,
    session_id: str,
    patch: dict[str, Any],
    code: str,
    param: str,
) -> None:
    a = replicas()
    with pytest.raises(Rejection) as refused:
        await a.registry.open(opening(session_id, **patch))
    assert (refused.value.type, refused.value.code) == ("invalid_request_error", code)
    assert refused.value.param == param
    assert await a.store.admitted_count() == 0 and not a.pool.bound


async def test_an_open_session_cannot_be_opened_again_here_or_elsewhere(
    replicas: Callable[..., Replica],
) -> None:
    a, b = replicas(), replicas("replica-b:1")
    await a.registry.open(opening("sess_1"))
    for registry in (a.registry, b.registry):
        with pytest.raises(Rejection) as refused:
            await registry.open(opening("sess_1"))
        assert refused.value.code == "session_already_open"
    assert a.count("sessions_admitted") == 1 and b.count("sessions_admitted") == 0


async def test_a_stage_with_no_room_refuses_the_session_and_gives_back_all_it_took(
    replicas: Callable[..., Replica], client: aioredis.Redis
) -> None:
    a = replicas()
    a.pool.fail["stage1"] = WorkerFullError("no stage1 worker has room")
    with pytest.raises(Rejection) as refused:
        await a.registry.open(opening("sess_1"))
    assert (refused.value.type, refused.value.code) == ("rate_limit_error", "resource_exhausted")
    assert a.count("sessions_refused", "worker_capacity") == 1
    # Its admission slot, and the stage0 slot bound before stage1 refused.
    assert await a.store.admitted_count() == 0
    assert [(b.address, b.closed) for b in a.pool.bound] == [("stage0:1", True)]
    assert a.count("sessions_active") == 0


async def test_an_unreachable_worker_refuses_the_session_as_stage_unavailable(
    replicas: Callable[..., Replica],
) -> None:
    a = replicas()
    a.pool.fail["stage0"] = grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone"
    )
    with pytest.raises(Rejection) as refused:
        await a.registry.open(opening("sess_1"))
    assert (refused.value.type, refused.value.code) == ("server_error", "stage_unavailable")
    assert a.count("sessions_refused", "no_worker") == 1
    assert await a.store.admitted_count() == 0


# ----------------------------------------------------------------- resume
def resuming(created: spb.SessionState, *, token: str = "", seq: int = 0) -> spb.ResumeSession:
    return spb.ResumeSession(
        session_id=created.session_id,
        incarnation=created.incarnation,
        resume_token=token or created.resume_token,
        last_received_seq=seq,
    )


async def test_a_resume_of_an_unknown_session_is_expired(
    replicas: Callable[..., Replica],
) -> None:
    with pytest.raises(Rejection) as refused:
        await replicas().registry.resume(spb.ResumeSession(session_id="sess_none"))
    assert (refused.value.code, refused.value.param) == ("session_resume_expired", "session_id")


async def test_a_resume_elsewhere_takes_the_session_over_and_replays_what_was_missed(
    replicas: Callable[..., Replica], client: aioredis.Redis
) -> None:
    a, b = replicas(), replicas("replica-b:1")
    old, outbound, _ = await a.registry.open(opening("sess_1"))
    created, _ = await next_events(outbound, 2)
    actor, resumed_out, generation = await b.registry.resume(
        resuming(created.session_created, seq=1)
    )
    assert actor is not old and generation == 2
    resumed, replayed = await next_events(resumed_out, 2)
    assert resumed.seq == 1 and resumed.session_resumed.session_id == "sess_1"
    assert replayed.seq == 2 and replayed.WhichOneof("kind") == "session_updated"
    fields = await client.hgetall(keys.session("sess_1"))  # type: ignore[misc]
    assert fields[b"replica"] == b"replica-b:1"
    assert await client.get(keys.owner("sess_1")) == actor.owner_token.encode()
    assert b.count("takeovers", "replica") == 1 and a.count("takeovers", "replica") == 0


async def test_a_resume_with_a_wrong_token_changes_nothing(
    replicas: Callable[..., Replica], client: aioredis.Redis
) -> None:
    a, b = replicas(), replicas("replica-b:1")
    actor, outbound, _ = await a.registry.open(opening("sess_1"))
    created, _ = await next_events(outbound, 2)
    with pytest.raises(Rejection) as refused:
        await b.registry.resume(resuming(created.session_created, token="rt_wrong"))
    assert (refused.value.code, refused.value.param) == ("session_resume_refused", "resume_token")
    assert await client.get(keys.owner("sess_1")) == actor.owner_token.encode()
    assert b.count("takeovers", "replica") == 0 and not b.pool.bound


async def test_an_owner_whose_lease_was_taken_stands_down_at_its_next_renewal(
    replicas: Callable[..., Replica],
) -> None:
    a, b = replicas(owner_lease_s=0.3), replicas("replica-b:1", owner_lease_s=0.3)
    old, outbound, _ = await a.registry.open(opening("sess_1"))
    created, _ = await next_events(outbound, 2)
    await b.registry.resume(resuming(created.session_created))
    maintaining = asyncio.create_task(a.registry.maintain())

    async def stood_down() -> bool:
        return old.closed

    try:
        await eventually(stood_down, timeout_s=2)
    finally:
        maintaining.cancel()
    # Its stream was told it was replaced, then ended.
    replaced, end = outbound.get_nowait(), outbound.get_nowait()
    assert replaced is not None and replaced.WhichOneof("kind") == "session_replaced"
    assert end is None


# ------------------------------------------------------------------- reap
async def test_a_session_whose_owner_vanished_is_reaped_once_its_grace_is_over(
    replicas: Callable[..., Replica], client: aioredis.Redis
) -> None:
    a, b = replicas(), replicas("replica-b:1", disconnect_grace_s=1, owner_lease_s=1)
    await a.registry.open(opening("sess_gone"))
    await a.registry.open(opening("sess_recent"))
    await a.registry.drain()  # stood down: the sessions stay open in Redis
    now_ms = int(time.time() * 1000)
    for sid, alive_ms in (("sess_gone", now_ms - 5000), ("sess_recent", now_ms)):
        await client.delete(keys.owner(sid))  # its owner's lease lapsed
        await client.hset(keys.session(sid), "alive_ms", alive_ms)  # type: ignore[misc]
    # Seen ownerless once: it may be a live owner that Redis kept waiting.
    assert await b.registry.reap() == 0
    await asyncio.sleep(b.settings.owner_lease_s)
    assert await b.registry.reap() == 1
    assert set(await b.store.admitted()) == {"sess_recent"}
    assert b.count("expired", "owner_lost") == 1
    assert 0 < await client.ttl(keys.session("sess_gone")) <= b.settings.resume_replay_ttl_s


async def test_an_owner_back_from_a_redis_stall_is_not_reaped_though_its_grace_passed(
    replicas: Callable[..., Replica], client: aioredis.Redis
) -> None:
    """A stall longer than the grace period: every lease lapsed and no
    `alive_ms` was written during it. The owner writes again within a third
    of a lease of Redis answering, and its fence takes the lapsed lease back."""
    a, b = replicas(), replicas("replica-b:1", disconnect_grace_s=1, owner_lease_s=1)
    actor, _, _ = await a.registry.open(opening("sess_stalled"))
    await client.delete(keys.owner("sess_stalled"))  # lapsed during the stall
    stale_ms = int(time.time() * 1000) - 60_000
    await client.hset(keys.session("sess_stalled"), "alive_ms", stale_ms)  # type: ignore[misc]
    assert await b.registry.reap() == 0  # first seen ownerless
    await a.store.set_fields("sess_stalled", actor.owner_token, {"x": "1"})
    assert await client.get(keys.owner("sess_stalled")) == actor.owner_token.encode()
    await asyncio.sleep(b.settings.owner_lease_s)
    assert await b.registry.reap() == 0
    assert await b.store.admitted() == ["sess_stalled"]


async def test_a_closed_session_left_admitted_is_released_by_the_reaper(
    replicas: Callable[..., Replica], client: aioredis.Redis
) -> None:
    a = replicas()
    await a.store.admit("sess_leftover", 4, "own_1")  # a cleanup that did not finish
    await client.delete(keys.owner("sess_leftover"))  # and its opener's lease lapsed
    assert await a.registry.reap() == 1
    assert await a.store.admitted_count() == 0


async def test_a_slot_admitted_but_not_yet_opened_is_not_reaped(
    replicas: Callable[..., Replica],
) -> None:
    """Between taking its slot and creating the session, an opener's session
    does not exist yet: another replica's reaper must not free the slot (under
    load that window is long, and the limit leaked: 7 sessions of 5)."""
    a, b = replicas(), replicas("replica-b:1")
    assert await a.store.admit("sess_opening", 1, "own_1")
    assert await b.registry.reap() == 0
    assert not await b.store.admit("sess_other", 1, "own_2")


async def test_a_replica_never_reaps_a_session_it_runs(
    replicas: Callable[..., Replica], client: aioredis.Redis
) -> None:
    a = replicas(disconnect_grace_s=1)
    b = replicas("replica-b:1", disconnect_grace_s=1, owner_lease_s=0.5)
    await a.registry.open(opening("sess_1"))
    # Redis sees an orphan (a renewal was missed, no word for long); the
    # replica whose actor runs the session knows better.
    await client.delete(keys.owner("sess_1"))
    await client.hset(keys.session("sess_1"), "alive_ms", 0)  # type: ignore[misc]
    assert await a.registry.reap() == 0
    assert await a.store.admitted() == ["sess_1"]
    assert await b.registry.reap() == 0  # first seen ownerless
    await asyncio.sleep(b.settings.owner_lease_s)
    assert await b.registry.reap() == 1


# ------------------------------------------------------------------ drain
async def test_drain_stands_every_actor_down_and_leaves_the_sessions_to_resume(
    replicas: Callable[..., Replica], client: aioredis.Redis
) -> None:
    a = replicas()
    actors = [(await a.registry.open(opening(f"sess_{i}")))[0] for i in range(2)]
    await a.registry.drain()
    assert all(actor.closed for actor in actors) and a.count("sessions_active") == 0
    # Still open and admitted: another replica resumes them.
    for i in range(2):
        state = await client.hget(keys.session(f"sess_{i}"), "state")  # type: ignore[misc]
        assert state == b"open"
    assert await a.store.admitted_count() == 2
