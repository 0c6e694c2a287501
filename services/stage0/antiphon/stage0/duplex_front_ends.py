"""A `moshi` worker as one stepper and several front-end processes
(`duplex_front_ends`).

Why: the model's step is one batch for every session, but everything else a
session costs the worker rides one event loop and one GIL beside it: some
4,800 gRPC messages a second at 192 sessions (80 ms of audio in, a frame out,
each), and on an H200 that worker ran late while the GPU step alone fit
(docs/performance.md). Here K front ends carry the streams, and the stepper
(this process) carries the model and only what crosses per step.

Each front end is a whole stage0 worker (main.serve, as `llm_front_ends`' are,
front_ends.py): its gRPC server at `listen`'s port + i, metrics at
`metrics_port` + i, its own health, its own registry entry and its share of
`capacity` (common/pod.py), and so its own rows of the batch. The session
service sees K workers and spreads sessions over them as over any. One port
each, not one shared with SO_REUSEPORT: the kernel spreads connections, not
sessions, and a session replica's one HTTP/2 connection carries all its
Bind streams, so one front end would get them all while the others idle;
and admission needs one process to own each count (its rows) and one
registry entry to say how much room it has. The stepper's own metrics (the
step histogram, late frames, rows) are at `metrics_port` + K.

Between them (crossing.py, shared_rows.py): audio and each step's frames in
shared memory, one notice per step and the rare requests by a pipe each.

Failures: a front end that dies (even by SIGKILL) loses its own sessions
only: the stepper frees their rows and starts it again, and the others go
on. A stepper that dies takes every stream with it: the front ends see their
pipe end, tell their sessions (`engine_failed`), end their streams at once
(UNAVAILABLE) and stop, so that the sessions bind elsewhere; the pod
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
from collections.abc import Callable, Coroutine
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from antiphon.common import bootstrap, metrics, pod
from antiphon.stage0.backend import LoadEngines
from antiphon.stage0.backends.moshi.crossing import Ready, ToFrontEnd, ToStepper
from antiphon.stage0.backends.moshi.front_end import StepperLink
from antiphon.stage0.backends.moshi.shared_rows import AudioRing, Layout, SharedRows, StepSlots
from antiphon.stage0.front_ends import CLOSE_S
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings

if TYPE_CHECKING:
    from antiphon.stage0.backends.moshi.stepper import Stepper

log = logging.getLogger(__name__)

# main.serve: one worker, given its settings and the loader of its engines.
Serve = Callable[..., Coroutine[Any, Any, None]]

# A front end that died is started again after this long.
RESTART_S = 1.0
# Messages waiting to be written to one front end: some 80 s of step notices.
# A front end this far behind reads nothing: it is killed (and started again).
OUTBOUND = 1024


def check(settings: Stage0Settings) -> None:
    """Refuse, before anything starts, a layout that cannot serve."""
    count = settings.duplex_front_ends
    if settings.backend != "moshi":
        raise SystemExit(
            f"duplex_front_ends={count} shares a duplex stepper; the {settings.backend!r} "
            "backend has none (set duplex_front_ends=1)"
        )
    if settings.llm_front_ends > 1:
        raise SystemExit("duplex_front_ends and llm_front_ends cannot both be above 1")
    pod.check_shares(settings.capacity, count, "front ends")


def shares(settings: Stage0Settings) -> list[tuple[Stage0Settings, range]]:
    """Each front end's own settings and its rows: its share of the capacity."""
    count, start = settings.duplex_front_ends, 0
    out = []
    for index in range(count):
        own = pod.worker_settings(settings, index, count)
        out.append((own, range(start, start + own.capacity)))
        start += own.capacity
    return out


def supervise(settings: Stage0Settings, serve: Serve) -> None:
    """The stepper and its front ends, until SIGTERM or SIGINT (then return),
    or until the model fails (then exit non-zero)."""
    check(settings)
    failure = asyncio.run(_run(settings, serve))
    if failure is not None:
        sys.exit(f"the duplex stepper stopped: {failure}")


async def _run(settings: Stage0Settings, serve: Serve) -> str | None:
    # torch and moshi load in the stepper only: the front ends never import them.
    from antiphon.stage0.backends.moshi.clock import LockstepClock
    from antiphon.stage0.backends.moshi.engines import load_lockstep, torch_threads
    from antiphon.stage0.backends.moshi.stepper import Stepper

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    failure: list[str] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    registry = metrics.service_registry()
    stage_metrics = Stage0Metrics(registry)
    stage_metrics.capacity.set(settings.capacity)
    metrics.serve(registry, settings.metrics_port + settings.duplex_front_ends)
    shared = SharedRows.create(settings.capacity, settings.duplex_jitter_ms)
    front_ends = [
        FrontEndProcess(index, own, rows, shared.layout, serve)
        for index, (own, rows) in enumerate(shares(settings))
    ]
    clock: LockstepClock | None = None
    try:
        # Alive (answering health checks, not ready) while the model loads.
        for front_end in front_ends:
            front_end.start()
        rings = [AudioRing(shared, row) for row in range(settings.capacity)]
        lockstep = await load_lockstep(settings, stage_metrics, audio=rings.__getitem__)
        stepper = Stepper(lockstep, rings, StepSlots(shared), stage_metrics)

        def failed() -> None:
            failure.append("its model failed a step")
            stop.set()

        clock = LockstepClock(
            stepper, thread_setup=torch_threads(settings.duplex_threads), on_failure=failed
        )
        stepper.on_open = clock.wake
        clock.start()
        for front_end in front_ends:
            front_end.attach(stepper)
        log.info("duplex stepper serving", extra={"front_ends": len(front_ends)})
        await stop.wait()
    finally:
        # The front ends drain (SIGTERM) while this loop still steps for them.
        for front_end in front_ends:
            front_end.stopping = True
        processes = [f.process for f in front_ends if f.process is not None]
        await asyncio.to_thread(pod.stop_processes, processes, settings.shutdown_grace_s + CLOSE_S)
        for front_end in front_ends:
            front_end.close()
        if clock is not None:
            await clock.close()
        shared.close(unlink=True)
    return failure[0] if failure else None


class FrontEndProcess:
    """One front end's process, seen from the stepper: its pipe (read on this
    loop, written by a thread of its own so that a slow reader never holds
    the step), and its restarts."""

    def __init__(
        self, index: int, settings: Stage0Settings, rows: range, layout: Layout, serve: Serve
    ) -> None:
        self.index = index
        self._settings = settings
        self._rows = rows
        self._layout = layout
        self._serve = serve
        self._stepper: Stepper | None = None
        self.process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._outbound: queue.Queue[ToFrontEnd | None] = queue.Queue(OUTBOUND)
        self._inbox: asyncio.Queue[ToStepper] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        # Its sessions leaving the stepper after it died (held: a task only
        # the loop refers to may be collected before it ends).
        self._leaving: asyncio.Task[None] | None = None
        self.stopping = False

    def start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        link = StepperLink(child, self._layout, self._rows)
        process = context.Process(
            target=run_front_end,
            args=(self._settings, link, self._serve),
            name=f"stage0-front-end-{self.index}",
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

    def attach(self, stepper: Stepper) -> None:
        self._stepper = stepper
        self._connect(stepper)

    def _connect(self, stepper: Stepper) -> None:
        stepper.connect(self.index, self)
        self.send(Ready())
        self._reader = asyncio.create_task(self._apply(stepper), name=f"front-end-{self.index}")

    def send(self, message: ToFrontEnd) -> None:
        try:
            self._outbound.put_nowait(message)
        except queue.Full:
            log.error("duplex front end reads nothing; killed", extra={"index": self.index})
            if self.process is not None:
                self.process.kill()

    async def _apply(self, stepper: Stepper) -> None:
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


def _write(conn: Connection, outbound: queue.Queue[ToFrontEnd | None]) -> None:
    while (message := outbound.get()) is not None:
        try:
            conn.send(message)
        except (OSError, ValueError):
            return  # it died, or its pipe was closed: the stepper notices


def run_front_end(settings: Stage0Settings, link: StepperLink, serve: Serve) -> None:
    """One front end's process: a stage0 worker whose engines are the stepper's."""
    pod.stop_with_parent()
    bootstrap.configure("stage0", settings)
    engines: LoadEngines = link.load
    asyncio.run(serve(settings, None, engines=engines))
