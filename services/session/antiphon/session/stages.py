"""Bindings from a session to its stage workers.

A binding is one bidi `Bind` stream to one worker. Requests go in through a
queue so the actor never blocks on gRPC flow control; results are handed to
a callback (the actor's mailbox) in the order the worker sent them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Generic, TypeVar

import grpc

from antiphon.common import tracing
from antiphon.common.grpcserver import channel, check_ready
from antiphon.v1 import stage_pb2, stage_pb2_grpc

log = logging.getLogger(__name__)

Req = TypeVar("Req")

STAGE0_SERVICE = "antiphon.v1.Stage0Service"
STAGE1_SERVICE = "antiphon.v1.Stage1Service"


class NoWorkerError(RuntimeError):
    """No worker of a stage is reachable and ready."""


class StreamEnded:
    """Posted after a binding's last result: its worker is gone (or it was closed)."""

    def __init__(self, binding: Binding[Any]) -> None:
        self.binding = binding


class Binding(Generic[Req]):
    """One open `Bind` stream; `on_event(StreamEnded(self))` reports its end."""

    def __init__(self, address: str, call: Any, on_event: Callable[[Any], None]) -> None:
        self.address = address
        self._call = call
        self._queue: asyncio.Queue[Req | None] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read(on_event))

    @classmethod
    def open(
        cls, address: str, bind: Callable[..., Any], on_event: Callable[[Any], None]
    ) -> Binding[Req]:
        box: list[Binding[Req]] = []

        async def requests() -> AsyncIterator[Req]:
            binding = box[0]
            while (req := await binding._queue.get()) is not None:
                yield req

        call = bind(requests(), metadata=tracing.inject_metadata())
        binding = cls(address, call, on_event)
        box.append(binding)
        return binding

    def send(self, request: Req) -> None:
        self._queue.put_nowait(request)

    async def close(self) -> None:
        self._queue.put_nowait(None)
        self._call.cancel()
        try:
            await self._reader
        except asyncio.CancelledError:
            pass

    async def _read(self, on_event: Callable[[Any], None]) -> None:
        try:
            async for event in self._call:
                on_event(event)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                log.warning(
                    "stage stream ended", extra={"address": self.address, "code": str(exc.code())}
                )
        except asyncio.CancelledError:
            pass
        finally:
            on_event(StreamEnded(self))


class StagePool:
    """The stage workers this replica may bind sessions to."""

    def __init__(self, stage0: Sequence[str], stage1: Sequence[str]) -> None:
        self._channels = {a: channel(a) for a in (*stage0, *stage1)}
        self._stage0 = list(stage0)
        self._stage1 = list(stage1)
        self._rr0 = itertools.cycle(range(max(1, len(stage0))))
        self._rr1 = itertools.cycle(range(max(1, len(stage1))))
        self._ready: dict[str, bool] = dict.fromkeys(self._channels, False)

    async def refresh(self) -> bool:
        """Probe every worker; True when each stage has at least one ready worker."""
        for addr in self._stage0:
            self._ready[addr] = await check_ready(self._channels[addr], STAGE0_SERVICE)
        for addr in self._stage1:
            self._ready[addr] = await check_ready(self._channels[addr], STAGE1_SERVICE)
        return any(self._ready[a] for a in self._stage0) and any(
            self._ready[a] for a in self._stage1
        )

    def _pick(self, addresses: list[str], rr: itertools.cycle[int], stage: str) -> str:
        for _ in addresses:
            addr = addresses[next(rr) % len(addresses)]
            if self._ready[addr]:
                return addr
        raise NoWorkerError(f"no ready {stage} worker")

    def stage0(self, addr: str) -> stage_pb2_grpc.Stage0ServiceStub:
        return stage_pb2_grpc.Stage0ServiceStub(self._channels[addr])

    def stage1(self, addr: str) -> stage_pb2_grpc.Stage1ServiceStub:
        return stage_pb2_grpc.Stage1ServiceStub(self._channels[addr])

    async def bind_stage0(
        self, on_event: Callable[[Any], None], *, avoid: str = ""
    ) -> tuple[Binding[stage_pb2.Stage0Request], stage_pb2.StageInfo]:
        """Bind to a ready stage0 worker (preferably not `avoid`, one that just failed)."""
        if avoid:
            self._ready[avoid] = False
        addr = self._pick(self._stage0, self._rr0, "stage0")
        stub = self.stage0(addr)
        info = await stub.Describe(stage_pb2.DescribeRequest(), timeout=5)
        return Binding.open(addr, stub.Bind, on_event), info

    async def bind_stage1(
        self, on_event: Callable[[Any], None], *, avoid: str = ""
    ) -> tuple[Binding[stage_pb2.Stage1Request], stage_pb2.StageInfo]:
        if avoid:
            self._ready[avoid] = False
        addr = self._pick(self._stage1, self._rr1, "stage1")
        stub = self.stage1(addr)
        info = await stub.Describe(stage_pb2.DescribeRequest(), timeout=5)
        return Binding.open(addr, stub.Bind, on_event), info

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
