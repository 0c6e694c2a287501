"""Stage worker capacity through real processes: a saturated pool refuses, a
closed session gives its room back, a drained or killed worker drops out.

Two stage0 workers of capacity 1 and one stage1 worker of capacity 2 (the
`synthetic` backends), registered in Redis; one session replica whose
static stage0 list names only the first worker, so binding to the second
proves it was found through the registry; one gateway.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis
from stack import LocalStack, Ports, free_port

from antiphon.common.workers import TTL_HEARTBEATS, WorkerInfo, WorkerRegistry, index_key
from antiphon.session.state import keys
from tests.support import tiers
from tests.support.polling import eventually, redis_now_ms
from tests.support.realtime import MANUAL, Event, RealtimeClient, of_type
from tests.support.speech import spoken

pytestmark = [pytest.mark.stack, pytest.mark.models]

DB = 10  # this module's own database on the shared test Redis
HEARTBEAT_S = 0.2
# The second worker heartbeats slower: a drain that removes it at once is
# then told apart from an entry that merely expired.
HEARTBEAT_B_S = 1.0
TTL_B_S = HEARTBEAT_B_S * TTL_HEARTBEATS
STAGE0 = "antiphon.v1.Stage0Service"


class Pool:
    """The stack, plus the second stage0 worker it can stop and start."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.port_b = free_port()

    @property
    def a(self) -> str:
        return f"127.0.0.1:{self.stack.ports.stage0}"

    @property
    def b(self) -> str:
        return f"127.0.0.1:{self.port_b}"

    def url(self) -> str:
        return f"ws://127.0.0.1:{self.stack.ports.gateway}/v1/realtime"

    def ensure_b(self) -> None:
        """The second worker is running (a test before may have stopped it)."""
        proc = self.stack.procs.get("stage0_b")
        if proc is None or proc.poll() is not None:
            self.start_b()

    def start_b(self) -> None:
        self.stack.spawn_grpc(
            "stage0_b",
            "stage0",
            self.port_b,
            free_port(),
            ANTIPHON_CAPACITY="1",
            ANTIPHON_HEARTBEAT_S=str(HEARTBEAT_B_S),
        )
        self.stack.wait_grpc_ready(self.port_b, STAGE0)


@pytest.fixture(scope="module")
def pool(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Pool]:
    # Started by hand (two stage0 workers, each with its own capacity).
    tiers.require(request, tiers.STACK, "starts a local stack")
    ports = Ports.free()
    stack = LocalStack(
        ports=ports,
        redis_url=f"{redis_url.rsplit('/', 1)[0]}/{DB}",
        extra_env={
            "ANTIPHON_BACKEND": "synthetic",
            "ANTIPHON_MAX_SESSIONS": "10",
            "ANTIPHON_HEARTBEAT_S": str(HEARTBEAT_S),
            "ANTIPHON_SHUTDOWN_GRACE_S": "5",
        },
    )
    p = Pool(stack)
    stack.run_dir.mkdir(parents=True, exist_ok=True)
    try:
        stack.spawn_grpc(
            "stage0", "stage0", ports.stage0, ports.stage0_metrics, ANTIPHON_CAPACITY="1"
        )
        stack.spawn_grpc(
            "stage1", "stage1", ports.stage1, ports.stage1_metrics, ANTIPHON_CAPACITY="2"
        )
        p.start_b()
        stack.spawn_grpc("session", "session", ports.session, ports.session_metrics)
        stack.spawn_gateway("gateway", ports.gateway)
        stack.wait_ready(180)
        yield p
    finally:
        stack.stop()


@pytest.fixture
async def redis(pool: Pool) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(pool.stack.redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def registry(redis: aioredis.Redis) -> WorkerRegistry:
    return WorkerRegistry(redis)


async def stage0_workers(registry: WorkerRegistry) -> dict[str, WorkerInfo]:
    return {w.address: w for w in await registry.workers("stage0")}


async def all_free(registry: WorkerRegistry, *addresses: str) -> bool:
    listed = await stage0_workers(registry)
    return all(a in listed and listed[a].room == 1 for a in addresses)


async def bound_stage0(pool: Pool, created: Event) -> str:
    """The address of the stage0 worker a session is bound to."""
    r = aioredis.Redis.from_url(pool.stack.redis_url)
    try:
        raw: bytes | None = await r.hget(  # type: ignore[assignment]
            keys.session(created["session"]["id"]), "stage0"
        )
    finally:
        await r.aclose()
    return (raw or b"").decode()


async def turn_completes(client: RealtimeClient) -> bool:
    await client.append(spoken("Hello there."))
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    cycle = await client.response_cycle(timeout=30)
    return bool(of_type(cycle, "response.done")[0]["response"]["status"] == "completed")


async def test_a_saturated_pool_refuses_with_resource_exhausted_and_capacity_returns(
    pool: Pool, registry: WorkerRegistry
) -> None:
    await eventually(lambda: all_free(registry, pool.a, pool.b))
    # One socket at a time: on the plain dialect a session is admitted as its
    # socket opens, so sockets opened together would race for the last slot.
    clients: list[RealtimeClient] = []
    try:
        opened = []
        for _ in range(2):
            clients.append(await RealtimeClient.connect(pool.url()))
            opened.append(await clients[-1].open(**MANUAL))
        first, second = opened
        assert (first["type"], second["type"]) == ("session.created", "session.created")
        # The one with the most room each time: one session per worker.
        assert {await bound_stage0(pool, first), await bound_stage0(pool, second)} == {
            pool.a,
            pool.b,
        }
        clients.append(await RealtimeClient.connect(pool.url()))
        refused = await clients[2].open(**MANUAL)
        assert refused["type"] == "error", refused
        assert refused["error"]["type"] == "rate_limit_error"
        assert refused["error"]["code"] == "resource_exhausted"
        assert refused["error"]["message"].startswith("no stage0 worker has room")
        # Sessions that are in keep working.
        assert await turn_completes(clients[0])

        await clients[0].close()
        freed = await bound_stage0(pool, first)
        await eventually(lambda: all_free(registry, freed))
        late = await RealtimeClient.connect(pool.url())
        clients.append(late)
        created = await late.open(**MANUAL)
        assert created["type"] == "session.created", created
        assert await bound_stage0(pool, created) == freed
        assert await turn_completes(late)
    finally:
        for c in clients:
            await c.close()


async def test_a_drained_worker_leaves_the_registry_and_sessions_go_to_the_other(
    pool: Pool, registry: WorkerRegistry
) -> None:
    pool.ensure_b()
    await eventually(lambda: all_free(registry, pool.a, pool.b))
    proc = pool.stack.procs["stage0_b"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    # No bound session to wait for: gone as it exits, as it left on its way out
    # (a killed worker's entry stays until it expires: the test below).
    assert await _absent(registry, pool.b)
    client = await RealtimeClient.connect(pool.url())
    try:
        created = await client.open(**MANUAL)
        assert created["type"] == "session.created", created
        assert await bound_stage0(pool, created) == pool.a
        assert await turn_completes(client)
    finally:
        await client.close()


async def test_a_killed_worker_drops_out_within_its_ttl_and_sessions_open_on_the_other(
    pool: Pool, registry: WorkerRegistry, redis: aioredis.Redis
) -> None:
    pool.ensure_b()
    await eventually(lambda: all_free(registry, pool.a, pool.b))
    pool.stack.kill("stage0_b")
    killed_ms = await redis_now_ms(redis)
    expires_ms = await redis.zscore(index_key("stage0"), pool.b)
    # Listed while it lived; after its death, one TTL at most (on Redis's clock).
    assert expires_ms is not None and killed_ms < expires_ms <= killed_ms + TTL_B_S * 1000
    # Until its entry expires, a session opened now skips it (unreachable) for the other.
    client = await RealtimeClient.connect(pool.url())
    try:
        created = await client.open(**MANUAL)
        assert created["type"] == "session.created", created
        assert await bound_stage0(pool, created) == pool.a
        await eventually(lambda: _absent(registry, pool.b))
        assert await turn_completes(client)
    finally:
        await client.close()


async def _absent(registry: WorkerRegistry, address: str) -> bool:
    return address not in await stage0_workers(registry)
