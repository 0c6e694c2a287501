"""The cluster the faults hit: bench.lib.cluster's two replicas and two gateways, two
workers per stage, and gateway 2 behind a proxy per replica."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import redis.asyncio as aioredis

from antiphon.session.state import keys
from bench.lib.cluster import Cluster
from bench.lib.tcpproxy import TcpProxy
from deploy.local.stack import LocalStack, Ports, free_port

STAGE_SERVICES = {"stage0": "antiphon.v1.Stage0Service", "stage1": "antiphon.v1.Stage1Service"}


class FaultCluster:
    """`bench.lib.cluster`'s two replicas and two gateways, two workers per
    stage, and gateway 2 behind a proxy per replica."""

    def __init__(self, sessions: int, token_ms: int, grace_s: float) -> None:
        ports = Ports.free()
        self.spare = {"stage0": free_port(), "stage1": free_port()}
        env = {
            "ANTIPHON_BACKEND": "synthetic",
            # Room for every session on either replica and on either worker.
            "ANTIPHON_MAX_SESSIONS": str(2 * sessions + 16),
            "ANTIPHON_CAPACITY": str(2 * sessions + 16),
            "ANTIPHON_DISCONNECT_GRACE_S": str(grace_s),
            "ANTIPHON_RESUME_REPLAY_TTL_S": "300",
            "ANTIPHON_OWNER_LEASE_S": "2",
            "ANTIPHON_REAPER_INTERVAL_S": "1",
            # Slow enough that a fault finds responses streaming.
            "ANTIPHON_SYNTHETIC_TOKEN_MS": str(token_ms),
            "ANTIPHON_STAGE0_ADDRESSES": json.dumps(
                [f"127.0.0.1:{ports.stage0}", f"127.0.0.1:{self.spare['stage0']}"]
            ),
            "ANTIPHON_STAGE1_ADDRESSES": json.dumps(
                [f"127.0.0.1:{ports.stage1}", f"127.0.0.1:{self.spare['stage1']}"]
            ),
        }
        self.stack = LocalStack(ports=ports, extra_env=env)
        self.cluster = Cluster(self.stack)
        env["ANTIPHON_SESSION_FALLBACK_ADDRESSES"] = json.dumps(
            [f"127.0.0.1:{self.cluster.session_b}"]
        )
        self.proxies = [
            TcpProxy(("127.0.0.1", ports.session), free_port()),
            TcpProxy(("127.0.0.1", self.cluster.session_b), free_port()),
        ]

    async def start(self) -> None:
        for proxy in self.proxies:
            await proxy.start()
        # Blocking waits on a thread: the proxies serve on this loop meanwhile.
        await asyncio.to_thread(self._start_processes)

    def _start_processes(self) -> None:
        s = self.stack
        s.start(timeout_s=180)
        self.cluster.start_replica_b()
        for stage, port in self.spare.items():
            s.spawn_grpc(f"{stage}_b", stage, port, free_port())
            s.wait_grpc_ready(port, STAGE_SERVICES[stage])
        self.spawn_gateway2()

    def spawn_gateway2(self) -> None:
        a, b = self.proxies
        self.stack.spawn_gateway(
            "gateway2",
            self.cluster.gateway2,
            ANTIPHON_SESSION_ADDRESS=a.address,
            ANTIPHON_SESSION_FALLBACK_ADDRESSES=json.dumps([b.address]),
        )
        self.stack.wait_ready(60, gateway_port=self.cluster.gateway2)

    def url(self, gateway: int, query: str = "") -> str:
        return self.cluster.url(gateway, query)

    async def busiest(self, field_: str, session_ids: list[str]) -> str:
        """The process the most sessions are bound to in `field_` (replica, stage0, stage1)."""
        r = aioredis.Redis.from_url(self.stack.redis_url)
        try:
            counts: Counter[str] = Counter()
            for sid in session_ids:
                raw: bytes | None = await r.hget(keys.session(sid), field_)  # type: ignore[assignment]
                counts[(raw or b"").decode()] += 1
        finally:
            await r.aclose()
        address = counts.most_common(1)[0][0] if counts else ""
        p = self.stack.ports
        if field_ == "replica":
            return self.cluster.replica_named(address)
        own = p.stage0 if field_ == "stage0" else p.stage1
        return field_ if address.endswith(f":{own}") else f"{field_}_b"

    def restart(self, name: str) -> None:
        s, p = self.stack, self.stack.ports
        if name == "gateway":
            s.spawn_gateway("gateway", p.gateway)
            s.wait_ready(60)
        elif name in ("session", "session_b"):
            self.cluster.restart(name)
        else:
            stage = name.removesuffix("_b")
            port = self.spare[stage] if name.endswith("_b") else getattr(p, stage)
            s.spawn_grpc(name, stage, port, free_port())
            s.wait_grpc_ready(port, STAGE_SERVICES[stage])

    async def stop(self) -> None:
        await asyncio.to_thread(self.stack.stop)
        for proxy in self.proxies:
            await proxy.close()
