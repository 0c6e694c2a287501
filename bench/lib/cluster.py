"""Two session replicas and two gateways on one Redis (deploy/local/stack.py's stack
plus replica B and gateway 2): what survival and faults measure on.

Both gateways prefer replica A and fail over to replica B. The stage workers run the
`synthetic` backends. Clients speak the duplex dialect: resuming, replay and
heartbeats are its extensions.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import grpc
import redis.asyncio as aioredis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from antiphon.session.state import keys
from bench.lib.realtime import duplex_url
from deploy.local.stack import LocalStack, Ports, free_port

SESSION_SERVICE = "antiphon.v1.SessionService"


class Cluster:
    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.session_b = free_port()
        self.gateway2 = free_port()

    def url(self, gateway: int = 1, query: str = "") -> str:
        """The duplex dialect on one of the two gateways, with any further `query`."""
        port = self.stack.ports.gateway if gateway == 1 else self.gateway2
        return duplex_url(port, query)

    def start_replica_a(self) -> None:
        p = self.stack.ports
        self.stack.spawn_grpc("session", "session", p.session, p.session_metrics)
        _wait_serving(p.session)

    def start_replica_b(self) -> None:
        self.stack.spawn_grpc("session_b", "session", self.session_b, free_port())
        _wait_serving(self.session_b)

    def replica_named(self, address: str) -> str:
        """The process name of the replica at `address` ("session" or "session_b")."""
        return "session_b" if address.endswith(f":{self.session_b}") else "session"

    async def owner_of(self, session_id: str) -> str:
        """The process name of the replica that owns a session now."""
        r = aioredis.Redis.from_url(self.stack.redis_url)
        try:
            raw: bytes | None = await r.hget(  # type: ignore[assignment]
                keys.session(session_id), "replica"
            )
        finally:
            await r.aclose()
        return self.replica_named((raw or b"").decode())

    def restart(self, name: str) -> None:
        (self.start_replica_b if name == "session_b" else self.start_replica_a)()


def _wait_serving(port: int, timeout_s: float = 60.0) -> None:
    """Until the replica on `port` serves: a gateway is ready with one replica up,
    so its readiness does not say that a restarted second one is back."""
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        health = health_pb2_grpc.HealthStub(ch)
        while time.monotonic() < deadline:
            with contextlib.suppress(grpc.RpcError):
                reply = health.Check(
                    health_pb2.HealthCheckRequest(service=SESSION_SERVICE), timeout=1
                )
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            time.sleep(0.1)
    raise TimeoutError(f"session replica on {port} not serving within {timeout_s}s")


@contextlib.contextmanager
def running_cluster(
    *, max_sessions: int, grace_s: float, replay_ttl_s: float, token_ms: int = 120
) -> Iterator[Cluster]:
    env = {
        "ANTIPHON_BACKEND": "synthetic",
        "ANTIPHON_MAX_SESSIONS": str(max_sessions),
        # One worker per stage, which must not be what limits sessions: room for all
        # of them twice, as a taken-over session may hold its old binding until the
        # worker notices the old replica is gone.
        "ANTIPHON_CAPACITY": str(2 * max_sessions),
        "ANTIPHON_DISCONNECT_GRACE_S": str(grace_s),
        "ANTIPHON_RESUME_REPLAY_TTL_S": str(replay_ttl_s),
        "ANTIPHON_OWNER_LEASE_S": "2",
        "ANTIPHON_REAPER_INTERVAL_S": "1",
        # Slow enough that a response is still streaming when a fault cuts in.
        "ANTIPHON_SYNTHETIC_TOKEN_MS": str(token_ms),
    }
    stack = LocalStack(ports=Ports.free(), extra_env=env)
    c = Cluster(stack)
    stack.extra_env["ANTIPHON_SESSION_FALLBACK_ADDRESSES"] = f'["127.0.0.1:{c.session_b}"]'
    try:
        stack.start(timeout_s=180)
        c.start_replica_b()
        stack.spawn_gateway("gateway2", c.gateway2)
        stack.wait_ready(60, gateway_port=c.gateway2)
        yield c
    finally:
        stack.stop()
