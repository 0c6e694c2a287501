"""Bootstrap of an asyncio gRPC server with health checks and a SIGTERM drain.

Health follows the gRPC convention: the empty service name means "alive",
the service's own name means "ready". On SIGTERM readiness flips to
NOT_SERVING, then `server.stop(grace)` lets open streams finish, then the
owner's `on_drain` releases what it holds.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

SERVER_OPTIONS = [
    # Audio frames and stage payloads are small, but a long history can be
    # large; 16 MiB keeps one session's prompt from being refused.
    ("grpc.max_send_message_length", 16 * 1024 * 1024),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    # Notice a dead peer (killed gateway or session replica) within seconds,
    # not at the TCP timeout.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
]

CHANNEL_OPTIONS = [
    # A Kubernetes headless Service resolves to every pod: spread streams
    # over them instead of pinning all of them to the first.
    ("grpc.lb_policy_name", "round_robin"),
    # A peer that restarts (a replica, a worker) is back within a second or
    # two; gRPC's default reconnect backoff grows to minutes and would fail
    # every call to it fast until then.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_send_message_length", 16 * 1024 * 1024),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
]


class GrpcApp:
    """One gRPC server, its health servicer and its shutdown sequence."""

    def __init__(self, service_name: str, address: str) -> None:
        self.service_name = service_name
        self.server = grpc.aio.server(options=SERVER_OPTIONS)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = self.server.add_insecure_port(address)
        self.stopping = asyncio.Event()
        self._started = False
        self._abandoned = False
        self._stop_now: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Answer health checks (alive, not yet ready), e.g. while models load."""
        if not self._started:
            self._started = True
            await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
            await self.set_ready(False)
            await self.server.start()

    async def set_ready(self, ready: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready
            else (health_pb2.HealthCheckResponse.NOT_SERVING)
        )
        await self.health.set(self.service_name, status)

    def abandon(self) -> None:
        """What the server serves is gone (a duplex front end's stepper): stop
        now, with no drain grace, so that every open stream ends at once
        (UNAVAILABLE) and its session binds elsewhere now."""
        self._abandoned = True
        self.stopping.set()
        if self._started:
            # A drain may be under way (a SIGTERM came first): cut it short.
            self._stop_now = asyncio.get_running_loop().create_task(self.server.stop(0))

    async def run(
        self,
        *,
        grace_s: float,
        on_drain: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Serve until SIGTERM/SIGINT, then drain and stop."""
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        log.info("serving", extra={"service_name": self.service_name, "port": self.port})
        await self.stopping.wait()
        log.info("draining", extra={"grace_s": grace_s})
        await self.set_ready(False)
        if on_drain is not None:
            await on_drain()
        await self.server.stop(0 if self._abandoned else grace_s)
        await self.health.enter_graceful_shutdown()
        log.info("stopped")


def channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


async def check_ready(ch: grpc.aio.Channel, service: str, timeout_s: float = 1.0) -> bool:
    """True when the peer reports `service` SERVING within the timeout."""
    stub = health_pb2_grpc.HealthStub(ch)
    try:
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
    except grpc.aio.AioRpcError:
        return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
