"""A worker as one stepper process and K front-end processes
(`duplex_front_ends`, stage0's and stage1's): the stepper's side of the pod.
This process owns the model; each front end is a whole worker of its stage
for its share of the sessions and of the rows (its own port, health, registry
entry and metrics: common/pod.py), reached by one pipe each, beside the
shared memory the stage lays out (common/stepper/shared_block.py).

Failures, the same in both stages: a front end that dies (even by SIGKILL)
loses its own sessions only: the stepper frees their rows and starts it
again, and the others go on. A stepper that dies takes every stream with it:
the front ends see their pipe end, tell their sessions, end their streams at
once (UNAVAILABLE) and stop, so that the sessions bind elsewhere; the pod
restarts. SIGTERM: each front end drains its own sessions (as one worker
does) while the stepper keeps stepping for them, then the stepper stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import queue
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from multiprocessing.connection import Connection
from typing import Any, Generic, Protocol, TypeVar

from antiphon.common import pod
from antiphon.common.stepper.messages import Ready

log = logging.getLogger(__name__)

# A front end that died is started again after this long.
RESTART_S = 1.0
# Messages waiting to be written to one front end: some 80 s of step notices.
# A front end this far behind reads nothing: it is killed (and started again).
OUTBOUND = 1024

In = TypeVar("In", contravariant=True)
L = TypeVar("L")


class FrontEndPort(Protocol):
    """How a stepper reaches one front end."""

    def send(self, message: object) -> None: ...


class Stepper(Protocol[In]):
    """What the pod needs of a stage's stepper."""

    def connect(self, front_end: int, port: FrontEndPort) -> None: ...

    async def disconnect(self, front_end: int) -> None:
        """The front end is gone: its sessions leave, their rows free."""
        ...

    async def apply(self, front_end: int, message: In) -> None:
        """One message from `front_end`, in the order it sent them."""
        ...


# Given the pod's `fail(reason)` (which stops it, non-zero), load the model
# and step; the stepper, until the pod stops.
OpenStepper = Callable[[Callable[[str], None]], AbstractAsyncContextManager[Stepper[Any]]]


class Shared(Protocol):
    """The shared memory the stage laid out (the stepper's: it unlinks it)."""

    def close(self, *, unlink: bool = False) -> None: ...


def check(count: int, backend: str, stepping: str, other: tuple[str, int], capacity: int) -> None:
    """Refuse, before anything starts, `count` front ends that cannot serve: a
    backend other than the one with a stepper (`stepping`), the stage's
    `other` split of its pod above 1 too, or too little capacity to share."""
    if backend != stepping:
        raise SystemExit(
            f"duplex_front_ends={count} shares a duplex stepper; the {backend!r} "
            "backend has none (set duplex_front_ends=1)"
        )
    if other[1] > 1:
        raise SystemExit(f"duplex_front_ends and {other[0]} cannot both be above 1")
    pod.check_shares(capacity, count, "front ends")


def supervise(pod_run: Coroutine[Any, Any, str | None]) -> None:
    """Run the pod (`run`, through the stage's layout): return after SIGTERM or
    SIGINT, exit non-zero when the stepper failed."""
    failure = asyncio.run(pod_run)
    if failure is not None:
        sys.exit(f"the duplex stepper stopped: {failure}")


async def run(
    front_ends: Sequence[FrontEndProcess[Any]],
    open_stepper: OpenStepper,
    shared: Shared,
    grace_s: float,
) -> str | None:
    """The front ends and the stepper, until SIGTERM or SIGINT (then None) or
    until the stepper fails (then why); then the shared memory goes."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    failure: list[str] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def fail(reason: str) -> None:
        failure.append(reason)
        stop.set()

    try:
        # Alive (answering health checks, not ready) while the model loads.
        for front_end in front_ends:
            front_end.start()
        async with open_stepper(fail) as stepper:
            for front_end in front_ends:
                front_end.attach(stepper)
            log.info("duplex stepper serving", extra={"front_ends": len(front_ends)})
            try:
                await stop.wait()
            finally:
                # The front ends drain (SIGTERM) while the stepper still steps for them.
                await _stop(front_ends, grace_s)
    finally:
        await _stop(front_ends, grace_s)
        shared.close(unlink=True)
    return failure[0] if failure else None


async def _stop(front_ends: Sequence[FrontEndProcess[Any]], grace_s: float) -> None:
    for front_end in front_ends:
        front_end.stopping = True
    processes = [f.process for f in front_ends if f.process is not None]
    await asyncio.to_thread(pod.stop_processes, processes, grace_s)
    for front_end in front_ends:
        front_end.close()


class FrontEndProcess(Generic[L]):
    """One front end's process, seen from the stepper: its pipe (read on this
    loop, written by a thread of its own so that a slow reader never holds
    the step), and its restarts. `target(link(conn))` is its process, `conn`
    its end of the pipe (`target` is pickled to it: a module's function, or a
    partial of one)."""

    def __init__(
        self, index: int, name: str, target: Callable[[L], None], link: Callable[[Connection], L]
    ) -> None:
        self.index = index
        self._name = name
        self._target = target
        self._link = link
        self._stepper: Stepper[Any] | None = None
        self.process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._outbound: queue.Queue[object | None] = queue.Queue(OUTBOUND)
        self._inbox: asyncio.Queue[object] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        # Its sessions leaving the stepper after it died (held: a task only
        # the loop refers to may be collected before it ends).
        self._leaving: asyncio.Task[None] | None = None
        self.stopping = False

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(
            target=self._target, args=(self._link(child),), name=f"{self._name}-{self.index}"
        )
        process.start()
        child.close()
        self.process, self._conn = process, parent
        self._outbound = queue.Queue(OUTBOUND)
        threading.Thread(
            target=_write, args=(parent, self._outbound), name=process.name, daemon=True
        ).start()
        loop = asyncio.get_running_loop()
        loop.add_reader(process.sentinel, self._exited)
        loop.add_reader(parent.fileno(), self._readable)
        if self._stepper is not None:
            self._connect(self._stepper)

    def attach(self, stepper: Stepper[Any]) -> None:
        self._stepper = stepper
        self._connect(stepper)

    def _connect(self, stepper: Stepper[Any]) -> None:
        stepper.connect(self.index, self)
        self.send(Ready())
        self._reader = asyncio.create_task(self._apply(stepper), name=f"front-end-{self.index}")

    def send(self, message: object) -> None:
        try:
            self._outbound.put_nowait(message)
        except queue.Full:
            log.error("duplex front end reads nothing; killed", extra={"index": self.index})
            if self.process is not None:
                self.process.kill()

    async def _apply(self, stepper: Stepper[Any]) -> None:
        while True:
            message = await self._inbox.get()
            try:
                await stepper.apply(self.index, message)
            except Exception:
                # One bad request must not stop the front end's others.
                log.exception("duplex request failed", extra={"index": self.index})

    def _readable(self) -> None:
        conn = self._conn
        assert conn is not None
        try:
            while conn.poll():
                self._inbox.put_nowait(conn.recv())
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(conn.fileno())

    def _exited(self) -> None:
        process = self.process
        assert process is not None
        self.close()
        if self._stepper is not None:
            self._leaving = asyncio.get_running_loop().create_task(
                self._stepper.disconnect(self.index)
            )
        if self.stopping:
            return
        log.error(
            "duplex front end died; its sessions leave, it starts again",
            extra={"index": self.index, "exitcode": process.exitcode},
        )
        asyncio.get_running_loop().call_later(RESTART_S, self._restart)

    def _restart(self) -> None:
        if not self.stopping:
            self.start()

    def close(self) -> None:
        """Stop reading and writing its pipe (it has ended, or the pod stops)."""
        loop = asyncio.get_running_loop()
        if self.process is not None:
            loop.remove_reader(self.process.sentinel)
        if self._conn is not None:
            loop.remove_reader(self._conn.fileno())
            self._conn.close()
            self._conn = None
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
        self._inbox = asyncio.Queue()
        with contextlib.suppress(queue.Full):
            self._outbound.put_nowait(None)


def _write(conn: Connection, outbound: queue.Queue[object | None]) -> None:
    while (message := outbound.get()) is not None:
        try:
            conn.send(message)
        except (OSError, ValueError):
            return  # it died, or its pipe was closed: the stepper notices
