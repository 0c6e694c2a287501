"""SIGTERM drains every tier: real processes (two gateways, two session
replicas, one worker per stage, the synthetic backends) on one Redis.

For each tier: its readiness fails, new work is refused, the work it holds
finishes or moves, and the process exits 0 within its grace. The gateway is
held mid-drain by stopping the session replicas (SIGSTOP) while a test looks
at it: its drain waits for the session to take its client's detach, so what
a draining gateway answers is seen with no time window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
import websockets
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.lib.cluster import Cluster, running_cluster
from tests.support import tiers
from tests.support.polling import eventually
from tests.support.realtime import MANUAL, Event, RealtimeClient, of_type

pytestmark = pytest.mark.stack

# The profile's `shutdown_grace_s`, which every process of the cluster runs with.
GRACE_S = 10.0
# What a process may take past its grace to exit: the interpreter's own teardown.
EXIT_SLACK_S = 5.0
SERVICES = {
    "session": "antiphon.v1.SessionService",
    "stage0": "antiphon.v1.Stage0Service",
    "stage1": "antiphon.v1.Stage1Service",
}


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    tiers.require(request, tiers.STACK, "starts a two-replica cluster")
    with running_cluster(max_sessions=6, grace_s=30.0, replay_ttl_s=30.0) as c:
        yield c


async def open_client(cluster: Cluster, gateway: int = 1) -> tuple[RealtimeClient, Event]:
    client = await RealtimeClient.connect(cluster.url(gateway))
    created = await client.open(**MANUAL)
    assert created["type"] == "session.created", created
    return client, created


async def answered(client: RealtimeClient) -> str:
    """The status of a response asked for now."""
    await client.send("response.create")
    cycle = await client.response_cycle()
    status: str = of_type(cycle, "response.done")[0]["response"]["status"]
    return status


def exits_cleanly(proc: subprocess.Popen[bytes]) -> int:
    """The exit status of a process told to stop (its grace, and a little)."""
    return proc.wait(GRACE_S + EXIT_SLACK_S)


def readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            return r.status, json.loads(r.read())["status"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["status"]


def grpc_ready(port: int, service: str) -> bool:
    """Whether the service on `port` says it is ready (an unreachable one is not)."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            reply = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=2
            )
        except grpc.RpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def until_not_ready(port: int, service: str) -> None:
    async def not_ready() -> bool:
        return not await asyncio.to_thread(grpc_ready, port, service)

    await eventually(not_ready, timeout_s=GRACE_S)


@contextlib.contextmanager
def stopped(cluster: Cluster, *names: str) -> Iterator[None]:
    """Processes paused (SIGSTOP) for the duration: whatever waits on them waits."""
    procs = [cluster.stack.procs[n] for n in names]
    for p in procs:
        p.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for p in procs:
            p.send_signal(signal.SIGCONT)


async def test_a_draining_gateway_fails_readiness_refuses_sockets_and_hands_its_clients_on(
    cluster: Cluster,
) -> None:
    client, created = await open_client(cluster, gateway=2)
    gateway = cluster.stack.procs["gateway2"]
    try:
        with stopped(cluster, "session", "session_b"):
            gateway.send_signal(signal.SIGTERM)

            # Held mid-drain: the client's detach waits for its session replica.
            async def draining() -> bool:
                return await asyncio.to_thread(readyz, cluster.gateway2) == (503, "draining")

            await eventually(draining, timeout_s=GRACE_S)
            with pytest.raises(websockets.InvalidStatus) as refused:
                await websockets.connect(cluster.url(2))
            assert refused.value.response.status_code == 503
        # Told to come back elsewhere: 1012, after its session was detached.
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                await client.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        assert exits_cleanly(gateway) == 0
        # The session is resumable through the other gateway, and answers.
        again = await RealtimeClient.connect(cluster.url(1, "?duplex=1&autostart=0"))
        last = max(e.get("server_event_seq", 0) for e in client.events)
        await again.send(
            "session.resume",
            session_id=created["session"]["id"],
            incarnation=created["incarnation"],
            resume_token=created["resume_token"],
            last_received_server_event_seq=last,
        )
        resumed = await again.until(lambda e: e["type"] in ("session.resumed", "error"))
        assert resumed["type"] == "session.resumed", resumed
        assert await answered(again) == "completed"
        await again.close()
    finally:
        cluster.stack.spawn_gateway("gateway2", cluster.gateway2)
        cluster.stack.wait_ready(60, gateway_port=cluster.gateway2)


async def test_a_draining_session_replica_hands_its_sessions_to_another(cluster: Cluster) -> None:
    client, created = await open_client(cluster, gateway=1)
    session_id = created["session"]["id"]
    assert await cluster.owner_of(session_id) == "session"
    replica = cluster.stack.procs["session"]
    port = cluster.stack.ports.session
    try:
        replica.send_signal(signal.SIGTERM)
        await until_not_ready(port, SERVICES["session"])
        # The gateway's stream ended with no word: it resumed the session on B.
        await client.until(lambda e: e["type"] == "session.resumed")
        assert await answered(client) == "completed"
        assert await cluster.owner_of(session_id) == "session_b"
        assert exits_cleanly(replica) == 0
        # A new session opens on the replica left.
        other, _ = await open_client(cluster, gateway=1)
        assert await answered(other) == "completed"
        await other.close()
    finally:
        await client.close()
        cluster.restart("session")


@pytest.mark.parametrize("stage", ["stage0", "stage1"])
async def test_a_draining_stage_worker_finishes_its_sessions_and_takes_no_new_one(
    cluster: Cluster, stage: str
) -> None:
    stack = cluster.stack
    client, _ = await open_client(cluster)
    worker = stack.procs[stage]
    port = getattr(stack.ports, stage)
    metrics_port = getattr(stack.ports, f"{stage}_metrics")
    try:
        # A session binds its workers as it opens, in the background: one
        # answer first makes sure it is bound before the worker drains.
        assert await answered(client) == "completed"
        worker.send_signal(signal.SIGTERM)
        await until_not_ready(port, SERVICES[stage])
        # New work refused: the stage's only worker takes no new session.
        refused, created = await open_client_or_error(cluster)
        assert created["type"] == "error", created
        await refused.ws.close()
        # The session it serves is served on until it ends.
        assert await answered(client) == "completed"
        await client.close()
        assert exits_cleanly(worker) == 0
    finally:
        await client.ws.close()
        if worker.poll() is None:  # it failed to exit: no leak into the next test
            worker.kill()
            worker.wait()
        stack.spawn_grpc(stage, stage, port, metrics_port)
        stack.wait_grpc_ready(port, SERVICES[stage], timeout_s=60)
        stack.wait_ready(60)


async def open_client_or_error(cluster: Cluster) -> tuple[RealtimeClient, Event]:
    client = await RealtimeClient.connect(cluster.url(1))
    return client, await client.open(**MANUAL)
