"""Bindings from a session to its stage workers.

A binding is one bidi `Bind` stream to one worker. Requests go in through a
queue so the actor never blocks on gRPC flow control; results are handed to
a callback (the actor's mailbox) in the order the worker sent them, each
once the mailbox has room: until then the stream is not read, and the
worker's outbox holds what it makes (its policy: merge, or end the stream). A
binding exists only once its worker admitted it: a worker with no room
refuses (RESOURCE_EXHAUSTED) and the pool tries the next one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

import grpc

from antiphon.common import tracing
from antiphon.common.grpcserver import channel, check_ready
from antiphon.common.workers import WorkerInfo, WorkerRegistry
from antiphon.v1 import stage_pb2, stage_pb2_grpc

log = logging.getLogger(__name__)

Req = TypeVar("Req")
T = TypeVar("T")

STAGE0_SERVICE = "antiphon.v1.Stage0Service"
STAGE1_SERVICE = "antiphon.v1.Stage1Service"
# How long a worker may take to answer a Describe or a Bind.
BIND_TIMEOUT_S = 5.0
# A worker restarted at the same address is ready before this replica's
# channel to it has left its reconnect backoff (at most 1 s, grpcserver.py):
# an UNAVAILABLE Describe waits this long once for the channel to connect.
RECONNECT_WAIT_S = 2.0
# Requests one binding may have waiting for its worker to read them. A worker
# that falls this far behind is treated as lost: the stream is cancelled and
# the session fails over to another worker, instead of queueing without end.
MAX_PENDING_REQUESTS = 4096


class BindError(RuntimeError):
    """No worker of a stage took the session: what its client is told, and
    the `sessions_refused` reason it counts under."""

    error_type = "server_error"
    code = "stage_unavailable"
    refused_reason = "no_worker"


class NoWorkerError(BindError):
    """No worker of a stage is reachable and ready."""


class WorkerFullError(BindError):
    """Workers of a stage are there, but none has room for another session."""

    error_type = "rate_limit_error"
    code = "resource_exhausted"
    refused_reason = "worker_capacity"


class BindRefused(RuntimeError):
    """A worker ended a `Bind` before admitting it (RESOURCE_EXHAUSTED: no room)."""

    def __init__(self, address: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{address}: {details or code.name}")
        self.code = code


class StreamEnded:
    """Posted after a binding's last result: its worker is gone (or it was closed)."""

    def __init__(self, binding: Binding[Any]) -> None:
        self.binding = binding


class StageResult:
    """One result, with the binding it came from: a session that let that
    binding go (detached, or moved to another worker) drops what it still
    had in flight, whenever it is read."""

    def __init__(self, binding: Binding[Any], event: Any) -> None:
        self.binding = binding
        self.event = event


# Where a binding posts each result, then its end; awaited, so a full
# mailbox holds the reader.
OnEvent = Callable[["StageResult | StreamEnded"], Awaitable[None]]


class Binding(Generic[Req]):
    """One open `Bind` stream; results are posted as `StageResult(self, event)`,
    and `on_event(StreamEnded(self))` reports its end."""

    def __init__(
        self,
        address: str,
        call: Any,
        queue: asyncio.Queue[Req | None],
        on_event: OnEvent,
    ) -> None:
        self.address = address
        self._call = call
        self._queue = queue
        self._reader = asyncio.create_task(self._read(on_event))

    @classmethod
    async def open(
        cls,
        address: str,
        bind: Callable[..., Any],
        on_event: OnEvent,
        *,
        timeout_s: float = BIND_TIMEOUT_S,
    ) -> Binding[Req]:
        """Open a stream and wait for the worker's answer: admitted (its initial
        metadata) or refused (the stream ends first, e.g. RESOURCE_EXHAUSTED)."""
        queue: asyncio.Queue[Req | None] = asyncio.Queue()

        async def requests() -> AsyncIterator[Req]:
            while (req := await queue.get()) is not None:
                yield req

        call = bind(requests(), metadata=tracing.inject_metadata())
        try:
            await asyncio.wait_for(call.initial_metadata(), timeout_s)
        except TimeoutError:
            call.cancel()
            raise BindRefused(address, grpc.StatusCode.DEADLINE_EXCEEDED, "no answer") from None
        if call.done():
            raise BindRefused(address, await call.code(), await call.details())
        return cls(address, call, queue, on_event)

    def send(self, request: Req) -> None:
        if self._queue.qsize() >= MAX_PENDING_REQUESTS:
            log.warning("stage worker too far behind", extra={"address": self.address})
            self._call.cancel()  # the reader reports the stream ended: fail-over
            return
        self._queue.put_nowait(request)

    async def close(self) -> None:
        self._queue.put_nowait(None)
        self._call.cancel()
        try:
            await self._reader
        except asyncio.CancelledError:
            pass

    async def _read(self, on_event: OnEvent) -> None:
        try:
            async for event in self._call:
                # Waits for room in the session's mailbox: backpressure.
                await on_event(StageResult(self, event))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                log.warning(
                    "stage stream ended", extra={"address": self.address, "code": str(exc.code())}
                )
        except asyncio.CancelledError:
            pass
        finally:
            await on_event(StreamEnded(self))


class Released(Binding[Req]):
    """A stage the session holds no worker slot on (detached: capacity
    follows the sockets). Nothing is sent while detached, so requests are
    dropped; there is no stream to close."""

    def __init__(self) -> None:
        # No stream, and so none of a Binding's stream state.
        self.address = ""

    def send(self, request: Req) -> None:
        pass

    async def close(self) -> None:
        pass


# Each kind of worker a pool binds, and the gRPC service it answers; the
# stages a session needs (a delegate is only for GPT-Live's delegated answers).
_SERVICES = {"stage0": STAGE0_SERVICE, "stage1": STAGE1_SERVICE, "delegate": STAGE0_SERVICE}
_NEEDED = ("stage0", "stage1")


class StagePool:
    """The stage workers this replica may bind sessions to.

    Workers listed in the registry (live, not draining, with room) come
    first, the one with the most room first (ties in turn); a stage with no
    registered worker falls back to the static address list, round robin
    over the ready ones. A worker that refuses (no room) or cannot be
    reached is skipped for the next one.
    """

    def __init__(
        self,
        stage0: Sequence[str],
        stage1: Sequence[str],
        registry: WorkerRegistry | None = None,
        delegate: Sequence[str] = (),
    ) -> None:
        # `delegate`: stage0 workers whose LLM answers GPT-Live's delegated
        # responses (assistant/delegate.py); static only, and not needed for readiness.
        self._static = {"stage0": list(stage0), "stage1": list(stage1), "delegate": list(delegate)}
        self._channels = {a: channel(a) for a in (*stage0, *stage1, *delegate)}
        self._ready: dict[str, bool] = dict.fromkeys(self._channels, False)
        self._turns = {stage: itertools.count() for stage in self._static}
        self._registry = registry

    async def refresh(self) -> bool:
        """Probe every worker, static or registered; True when each stage has
        at least one ready worker (a registered one must not be draining)."""
        ready = []
        for stage, service in _SERVICES.items():
            registered = [w.address for w in await self._registered(stage) if not w.draining]
            addresses = list(dict.fromkeys((*self._static[stage], *registered)))
            # Probing also keeps each channel connected: a bind then never
            # meets a channel still backing off from a worker's restart.
            probes = [check_ready(self._channel(a), service) for a in addresses]
            for addr, ok in zip(addresses, await asyncio.gather(*probes), strict=True):
                self._ready[addr] = ok
            if stage in _NEEDED:
                ready.append(any(self._ready[a] for a in addresses))
        return all(ready)

    def _channel(self, addr: str) -> grpc.aio.Channel:
        if addr not in self._channels:
            # A worker first seen in the registry.
            self._channels[addr] = channel(addr)
        return self._channels[addr]

    def stage0(self, addr: str) -> stage_pb2_grpc.Stage0ServiceStub:
        return stage_pb2_grpc.Stage0ServiceStub(self._channel(addr))

    def stage1(self, addr: str) -> stage_pb2_grpc.Stage1ServiceStub:
        return stage_pb2_grpc.Stage1ServiceStub(self._channel(addr))

    async def bind_stage0(
        self, on_event: OnEvent, *, avoid: str = ""
    ) -> tuple[Binding[stage_pb2.Stage0Request], stage_pb2.StageInfo]:
        """Bind to a stage0 worker with room (not `avoid`, one that just failed)."""
        return await self._bind("stage0", self.stage0, on_event, avoid)

    async def bind_stage1(
        self, on_event: OnEvent, *, avoid: str = ""
    ) -> tuple[Binding[stage_pb2.Stage1Request], stage_pb2.StageInfo]:
        return await self._bind("stage1", self.stage1, on_event, avoid)

    async def bind_delegate(
        self, on_event: OnEvent
    ) -> tuple[Binding[stage_pb2.Stage0Request], stage_pb2.StageInfo]:
        """Bind to a delegate LLM's worker, for one delegated answer."""
        if not self._static["delegate"]:
            raise NoWorkerError("no delegate LLM is configured (delegate_addresses)")
        return await self._bind("delegate", self.stage0, on_event, "")

    async def _bind(
        self,
        stage: str,
        stub_for: Callable[[str], Any],
        on_event: OnEvent,
        avoid: str,
    ) -> tuple[Binding[Any], stage_pb2.StageInfo]:
        if avoid in self._ready:
            self._ready[avoid] = False
        full: list[str] = []
        unreachable: list[str] = []
        for addr in await self._candidates(stage, avoid, full):
            stub = stub_for(addr)
            try:
                info = await _describe(stub)
                return await Binding.open(addr, stub.Bind, on_event), info
            except BindRefused as exc:
                if exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    full.append(str(exc))
                    continue
                unreachable.append(str(exc))
            except grpc.aio.AioRpcError as exc:
                unreachable.append(f"{addr}: {exc.code().name}")
            if addr in self._ready:
                self._ready[addr] = False
        if full:
            raise WorkerFullError(f"no {stage} worker has room: {'; '.join(full)}")
        raise NoWorkerError(f"no ready {stage} worker" + "".join(f"; {u}" for u in unreachable))

    async def _candidates(self, stage: str, avoid: str, full: list[str]) -> list[str]:
        """Addresses to try, best first; registered workers with no room go to `full`."""
        turn = next(self._turns[stage])
        registered = [w for w in await self._registered(stage) if w.address != avoid]
        if registered:
            with_room = _rotated([w for w in registered if w.room > 0], turn)
            full.extend(
                f"{w.address}: {'draining' if w.draining else f'{w.active}/{w.capacity} sessions'}"
                for w in registered
                if w.room == 0
            )
            # One the last probe found down (killed, still listed until its
            # entry expires) goes last; then the most room; the sort is
            # stable, so equal ones keep the rotated (round robin) order.
            ordered = sorted(
                with_room, key=lambda w: (not self._ready.get(w.address, True), -w.room)
            )
            return [w.address for w in ordered]
        ready = [a for a in self._static[stage] if self._ready[a] and a != avoid]
        return _rotated(ready, turn)

    async def _registered(self, stage: str) -> list[WorkerInfo]:
        if self._registry is None or stage not in _NEEDED:
            return []  # delegates are listed statically only
        try:
            return await self._registry.workers(stage)
        except Exception:
            # Redis away: the static list still works.
            log.warning("worker registry unreadable", exc_info=True)
            return []

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()


def _rotated(items: list[T], turn: int) -> list[T]:
    if not items:
        return items
    k = turn % len(items)
    return items[k:] + items[:k]


async def _describe(stub: Any) -> stage_pb2.StageInfo:
    """The worker's `Describe`; an UNAVAILABLE one is asked again once, waiting
    for the channel to connect (a worker that came back at the same address)."""
    try:
        info: stage_pb2.StageInfo = await stub.Describe(
            stage_pb2.DescribeRequest(), timeout=BIND_TIMEOUT_S
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        info = await stub.Describe(
            stage_pb2.DescribeRequest(), timeout=RECONNECT_WAIT_S, wait_for_ready=True
        )
    return info
