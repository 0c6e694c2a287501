"""The worker registry on a real Redis: listing, heartbeat, expiry, drain, leave.

The expiry case registers from a real process and kills it with -9, as a
crashed worker would vanish.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator, Callable

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Gauge

from antiphon.common import workers
from antiphon.common.binding import ActiveSessions
from antiphon.common.workers import WorkerInfo, WorkerRegistry, WorkerSettings
from tests.support import redis_dbs
from tests.support.polling import eventually, redis_now_ms

DB = 9  # this module's own database on the shared test Redis
HEARTBEAT_S = 0.1
TTL_S = HEARTBEAT_S * workers.TTL_HEARTBEATS
# Longer than any test here: a change seen sooner was published on the change.
NO_HEARTBEAT_S = 600.0
# The worker killed with -9: its entry outlives it long enough to be read.
KILLED_HEARTBEAT_S = 0.5


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.from_url(db_url(redis_url))
    await c.flushdb()
    try:
        yield c
    finally:
        await c.aclose()


def db_url(redis_url: str) -> str:
    return redis_dbs.db_url(redis_url, DB)


def sessions(capacity: int) -> ActiveSessions:
    gauge = Gauge("sessions_active", "test", registry=CollectorRegistry())
    return ActiveSessions(gauge, capacity=capacity)


def settings(redis_url: str, address: str, heartbeat_s: float = HEARTBEAT_S) -> WorkerSettings:
    return WorkerSettings(
        redis_url=db_url(redis_url), advertise_address=address, heartbeat_s=heartbeat_s
    )


async def listed(registry: WorkerRegistry, stage: str) -> dict[str, WorkerInfo]:
    return {w.address: w for w in await registry.workers(stage)}


async def test_a_worker_is_listed_with_its_capacity_and_its_load_as_it_changes(
    client: aioredis.Redis, redis_url: str
) -> None:
    registry = WorkerRegistry(client)
    active = sessions(capacity=2)
    # No heartbeat comes during the test: each change is published as it happens.
    quiet = settings(redis_url, "10.0.0.1:50061", heartbeat_s=NO_HEARTBEAT_S)
    async with workers.registered(quiet, "stage0", active):
        assert await listed(registry, "stage0") == {
            "10.0.0.1:50061": WorkerInfo("10.0.0.1:50061", 2, 0, False)
        }
        assert await listed(registry, "stage1") == {}
        with active.track():
            await eventually(
                lambda: _has(registry, "stage0", "10.0.0.1:50061", lambda w: w.active == 1)
            )
            (w,) = await registry.workers("stage0")
            assert w.room == 1
        await eventually(lambda: _has(registry, "stage0", "10.0.0.1:50061", lambda w: w.room == 2))


async def test_heartbeats_keep_a_worker_listed_well_past_its_ttl(
    client: aioredis.Redis, redis_url: str
) -> None:
    registry = WorkerRegistry(client)
    async with workers.registered(
        settings(redis_url, "10.0.0.5:50061"), "stage0", sessions(capacity=1)
    ):
        await asyncio.sleep(TTL_S * 3)
        assert "10.0.0.5:50061" in await listed(registry, "stage0")


async def test_a_draining_worker_has_no_room_and_a_leaving_one_is_gone(
    client: aioredis.Redis, redis_url: str
) -> None:
    registry = WorkerRegistry(client)
    active = sessions(capacity=4)
    async with workers.registered(settings(redis_url, "10.0.0.2:50071"), "stage1", active):
        assert active.refusal() is None
        await active.drain()
        assert active.refusal() == "worker is draining"
        await eventually(lambda: _has(registry, "stage1", "10.0.0.2:50071", lambda w: w.draining))
        (w,) = await registry.workers("stage1")
        assert w.room == 0
    # Deregistered at once, not left to expire.
    assert await listed(registry, "stage1") == {}
    assert await client.exists(workers.index_key("stage1"), workers.info_key("stage1")) == 0


def test_a_full_worker_refuses_until_a_session_ends() -> None:
    active = sessions(capacity=1)
    assert active.refusal() is None
    with active.track():
        assert active.refusal() == "worker is at capacity (1/1 sessions)"
    assert active.refusal() is None


_WORKER = """
import asyncio, sys
from prometheus_client import CollectorRegistry, Gauge
from antiphon.common import workers
from antiphon.common.binding import ActiveSessions

async def main():
    active = ActiveSessions(Gauge("a", "a", registry=CollectorRegistry()), capacity=3)
    settings = workers.WorkerSettings(
        redis_url=sys.argv[1], advertise_address=sys.argv[2], heartbeat_s=float(sys.argv[3])
    )
    async with workers.registered(settings, "stage0", active):
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_worker_killed_with_sigkill_drops_out_within_its_ttl(
    client: aioredis.Redis, redis_url: str
) -> None:
    registry = WorkerRegistry(client)
    survivor = sessions(capacity=1)
    async with workers.registered(settings(redis_url, "10.0.0.4:50061"), "stage0", survivor):
        dead = "10.0.0.3:50061"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WORKER, db_url(redis_url), dead, str(KILLED_HEARTBEAT_S)
        )
        try:
            await eventually(
                lambda: _has(registry, "stage0", dead, lambda w: w.capacity == 3), timeout_s=30
            )
            proc.kill()
            await proc.wait()
            killed_ms = await redis_now_ms(client)
            expires_ms = await client.zscore(workers.index_key("stage0"), dead)
            # Listed while it lived; after its death, one TTL at most (Redis's clock).
            ttl_ms = KILLED_HEARTBEAT_S * workers.TTL_HEARTBEATS * 1000
            assert expires_ms is not None and killed_ms < expires_ms <= killed_ms + ttl_ms
            await eventually(lambda: _absent(registry, "stage0", dead))
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert set(await listed(registry, "stage0")) == {"10.0.0.4:50061"}
        # The reader pruned the dead entry's info too.
        assert await client.hkeys(workers.info_key("stage0")) == [b"10.0.0.4:50061"]


def test_the_advertised_address_defaults_to_the_listen_address_on_this_host() -> None:
    own = socket.gethostbyname(socket.gethostname())
    assert WorkerSettings(listen="0.0.0.0:50061").advertised() == f"{own}:50061"
    assert WorkerSettings(listen="[::]:50061").advertised() == f"{own}:50061"
    assert WorkerSettings(listen="127.0.0.1:50071").advertised() == "127.0.0.1:50071"
    explicit = WorkerSettings(listen="0.0.0.0:50061", advertise_address="10.9.8.7:50061")
    assert explicit.advertised() == "10.9.8.7:50061"


async def _has(
    registry: WorkerRegistry, stage: str, address: str, check: Callable[[WorkerInfo], bool]
) -> bool:
    w = (await listed(registry, stage)).get(address)
    return w is not None and check(w)


async def _absent(registry: WorkerRegistry, stage: str, address: str) -> bool:
    return address not in await listed(registry, stage)
