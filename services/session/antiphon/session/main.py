"""Entry point: `python -m antiphon.session.main`."""

from __future__ import annotations

import asyncio
import contextlib

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from antiphon.common import bootstrap, loop_lag, metrics
from antiphon.common.grpcserver import GrpcApp
from antiphon.common.workers import WorkerRegistry
from antiphon.session.metrics import SessionMetrics
from antiphon.session.registry import SessionRegistry
from antiphon.session.service import SessionService
from antiphon.session.settings import SessionSettings
from antiphon.session.stage.stages import StagePool
from antiphon.session.state.store import SessionStore
from antiphon.v1 import session_pb2_grpc

SERVICE_NAME = "antiphon.v1.SessionService"


async def serve(settings: SessionSettings) -> None:
    registry = metrics.service_registry()
    session_metrics = SessionMetrics(registry)
    metrics.serve(registry, settings.metrics_port)
    # Callers queue for a connection rather than fail: hundreds of actors may
    # journal at once, and redis-py's default pool raises past 100.
    # A pool given to the client brings its own retry policy, and from_url's
    # is none: after a Redis restart every pooled connection is stale, so its
    # next command would fail the session using it. Retry on a dead connection
    # or a Redis still loading its AOF (not on a timeout, which may have run
    # the command), for as long as a restart takes: ~10 s of backoff in all.
    connections = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=settings.redis_max_connections,
        timeout=30,
        retry=Retry(ExponentialWithJitterBackoff(base=0.1, cap=2.0), 8),
        retry_on_error=[RedisConnectionError],
    )
    client = aioredis.Redis(connection_pool=connections)
    store = SessionStore(
        client,
        lease_ms=int(settings.owner_lease_s * 1000),
        journal_max_bytes=settings.resume_replay_max_bytes_per_session,
        journal_ttl_s=settings.resume_replay_ttl_s,
        ops_cache_size=settings.completed_append_cache_size,
        outage_s=settings.store_outage_max_s,
    )
    # Workers registered in Redis first; the static lists when none is.
    pool = StagePool(
        settings.stage0_addresses,
        settings.stage1_addresses,
        registry=WorkerRegistry(client),
        delegate=settings.delegate_addresses,
    )
    sessions = SessionRegistry(settings=settings, store=store, pool=pool, metrics=session_metrics)
    service = SessionService(sessions)
    app = GrpcApp(SERVICE_NAME, settings.listen)
    session_pb2_grpc.add_SessionServiceServicer_to_server(service, app.server)

    async def watch_readiness() -> None:
        # Ready only while Redis answers and each stage has a ready worker:
        # the gateway's /readyz reflects this.
        while True:
            ready = await store.ping() and await pool.refresh()
            await app.set_ready(ready)
            await asyncio.sleep(settings.readiness_interval_s)

    watcher = asyncio.create_task(watch_readiness())
    maintenance = asyncio.create_task(sessions.maintain())

    async def drain() -> None:
        watcher.cancel()
        maintenance.cancel()
        await sessions.drain()

    try:
        async with loop_lag.watching(session_metrics.loop_lag):
            await app.run(grace_s=settings.shutdown_grace_s, on_drain=drain)
    finally:
        for task in (watcher, maintenance):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await pool.close()
        await client.aclose()
        await connections.disconnect()


def main() -> None:
    bootstrap.run("session", SessionSettings, serve)


if __name__ == "__main__":
    main()
