"""The stage worker registry in Redis: which workers serve a stage, with how much room.

Per stage, two keys (the hash tag keeps them in one Redis Cluster slot, so
the scripts below stay legal there):

- `ap:workers:{<stage>}`: a ZSET of advertised addresses, scored by the
  time (Redis server clock, ms) at which the entry expires;
- `ap:workers:{<stage>}:info`: a hash, address -> JSON
  `{"capacity": n, "active": n, "draining": bool}`.

A worker re-publishes its entry every heartbeat (and at once when its load
changes) with an expiry of a few heartbeats, so a worker killed with -9
drops out on its own; readers drop expired entries as they list them. The
server's clock scores every entry, so clock skew between hosts cannot keep
a dead worker listed or hide a live one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from antiphon.common.binding import ActiveSessions
from antiphon.common.config import ServiceSettings

log = logging.getLogger(__name__)

# A worker is listed for this many heartbeats after its last one.
TTL_HEARTBEATS = 3
# How long a registry call may take, and a leaving worker waits for its
# deregistration (the entry lapses on its own within its TTL anyway).
REDIS_TIMEOUT_S = 2.0
LEAVE_TIMEOUT_S = 3.0


def index_key(stage: str) -> str:
    return f"ap:workers:{{{stage}}}"


def info_key(stage: str) -> str:
    return f"ap:workers:{{{stage}}}:info"


# Drops the entries whose expiry has passed; `now` is the server's clock in ms.
_PRUNE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  redis.call('HDEL', KEYS[2], unpack(dead))
end
"""

# KEYS[1] index, KEYS[2] info; ARGV[1] address, ARGV[2] info JSON, ARGV[3] ttl ms.
_PUBLISH = (
    _PRUNE
    + """
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"""
)

# KEYS[1] index, KEYS[2] info. Returns {addresses, infos} of the live entries.
_LIST = (
    _PRUNE
    + """
local live = redis.call('ZRANGE', KEYS[1], 0, -1)
if #live == 0 then return {{}, {}} end
return {live, redis.call('HMGET', KEYS[2], unpack(live))}
"""
)


@dataclass(frozen=True)
class WorkerInfo:
    """One registered worker, as last published."""

    address: str
    capacity: int
    active: int
    draining: bool

    @property
    def room(self) -> int:
        """Sessions it would take now: none while draining."""
        return 0 if self.draining else max(0, self.capacity - self.active)


class WorkerRegistry:
    """Reads and writes the registry of every stage, on a client it is handed."""

    def __init__(self, client: aioredis.Redis) -> None:
        self._r = client
        self._publish = client.register_script(_PUBLISH)
        self._list = client.register_script(_LIST)

    async def publish(self, stage: str, info: WorkerInfo, *, ttl_ms: int) -> None:
        payload = json.dumps(
            {"capacity": info.capacity, "active": info.active, "draining": info.draining}
        )
        await self._publish(
            keys=[index_key(stage), info_key(stage)], args=[info.address, payload, ttl_ms]
        )

    async def remove(self, stage: str, address: str) -> None:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.zrem(index_key(stage), address)
            pipe.hdel(info_key(stage), address)
            await pipe.execute()

    async def workers(self, stage: str) -> list[WorkerInfo]:
        """The live workers of a stage (draining ones included), by address."""
        addresses, infos = await self._list(keys=[index_key(stage), info_key(stage)])
        out = []
        for raw_address, raw in zip(addresses, infos, strict=True):
            if raw is None:
                continue  # listed, but its info went with a concurrent removal
            fields: dict[str, Any] = json.loads(raw)
            out.append(
                WorkerInfo(
                    address=_text(raw_address),
                    capacity=int(fields["capacity"]),
                    active=int(fields["active"]),
                    draining=bool(fields["draining"]),
                )
            )
        return sorted(out, key=lambda w: w.address)


class WorkerPresence:
    """One worker's own entry: published once it is ready, re-published every
    heartbeat and whenever its load changes, removed when it leaves."""

    def __init__(
        self,
        registry: WorkerRegistry,
        *,
        stage: str,
        address: str,
        sessions: ActiveSessions,
        heartbeat_s: float,
    ) -> None:
        self._registry = registry
        self._stage = stage
        self._address = address
        self._sessions = sessions
        self._heartbeat_s = heartbeat_s
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        sessions.watch(self._changed.set)

    def info(self) -> WorkerInfo:
        s = self._sessions
        return WorkerInfo(self._address, s.capacity, s.count, s.draining)

    async def start(self) -> None:
        """Publish now (a registry that is down is retried by the heartbeat), then keep it up."""
        await self._beat()
        self._task = asyncio.create_task(self._heartbeat())
        log.info("registered", extra={"stage": self._stage, "address": self._address})

    async def leave(self) -> None:
        """Stop the heartbeat and remove the entry: nobody binds here any more."""
        if self._task is not None:
            self._task.cancel()
            # Bounded: a worker that cannot reach its registry must still exit.
            await asyncio.wait({self._task}, timeout=LEAVE_TIMEOUT_S)
        try:
            await asyncio.wait_for(
                self._registry.remove(self._stage, self._address), LEAVE_TIMEOUT_S
            )
        except Exception:
            # The entry expires on its own within its TTL.
            log.warning("deregistration failed", exc_info=True)
        log.info("deregistered", extra={"stage": self._stage, "address": self._address})

    async def _heartbeat(self) -> None:
        while True:
            # Not asyncio.wait_for: on Python 3.11 it can swallow a cancel that
            # lands as the event is set (a drain does both at once), and the
            # heartbeat then outlived its worker's shutdown.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._heartbeat_s):
                    await self._changed.wait()
            await self._beat()

    async def _beat(self) -> None:
        self._changed.clear()
        ttl_ms = int(self._heartbeat_s * TTL_HEARTBEATS * 1000)
        try:
            await self._registry.publish(self._stage, self.info(), ttl_ms=ttl_ms)
        except Exception:
            # Redis away: the entry lapses and sessions bind elsewhere (or
            # through the static list) until a later heartbeat gets through.
            log.warning("heartbeat failed", exc_info=True)


class WorkerSettings(ServiceSettings):
    """What every stage worker has: where it listens, what it advertises, its registry."""

    listen: str = ""
    # Redis of the worker registry; empty = not registered (the session
    # service then binds through its static address lists only).
    redis_url: str = ""
    # The address session replicas dial; empty = `listen`, a wildcard host
    # replaced by this host's own address (a container's IP under Compose,
    # where replicas share one environment). Kubernetes sets the pod IP.
    advertise_address: str = ""
    heartbeat_s: float = 1.0

    def advertised(self) -> str:
        if self.advertise_address:
            return self.advertise_address
        host, _, port = self.listen.rpartition(":")
        if host in ("", "0.0.0.0", "[::]"):
            host = own_address()
        return f"{host}:{port}"


def own_address() -> str:
    """This host's address as its name resolves (loopback when it does not)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


@contextlib.asynccontextmanager
async def registered(
    settings: WorkerSettings, stage: str, sessions: ActiveSessions
) -> AsyncIterator[None]:
    """Listed in the registry while the body runs (when one is configured),
    removed after it: call once the worker is ready, around its serving."""
    if not settings.redis_url:
        yield
        return
    # Timeouts: a registry call that hangs would hold the heartbeat, or a
    # draining worker's exit, for as long as the connection does.
    client = aioredis.Redis.from_url(
        settings.redis_url,
        socket_timeout=REDIS_TIMEOUT_S,
        socket_connect_timeout=REDIS_TIMEOUT_S,
    )
    entry = WorkerPresence(
        WorkerRegistry(client),
        stage=stage,
        address=settings.advertised(),
        sessions=sessions,
        heartbeat_s=settings.heartbeat_s,
    )
    try:
        await entry.start()
        yield
    finally:
        await entry.leave()
        await client.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
