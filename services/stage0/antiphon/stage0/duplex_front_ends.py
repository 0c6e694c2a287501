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

The pod's processes, their restarts and their stop are common/stepper/pod.py's
(stage1's `mimi` worker is split the same way); a front end told its stepper
is gone tells its sessions `engine_failed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from antiphon.common import bootstrap, metrics, pod
from antiphon.common.stepper import pod as stepper_pod
from antiphon.stage0.backend import LoadEngines
from antiphon.stage0.backends.moshi.front_end import StepperLink
from antiphon.stage0.backends.moshi.shared_rows import AudioRing, SharedRows, StepSlots
from antiphon.stage0.front_ends import CLOSE_S
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings

log = logging.getLogger(__name__)

# main.serve: one worker, given its settings and the loader of its engines.
Serve = Callable[..., Coroutine[Any, Any, None]]


def check(settings: Stage0Settings) -> None:
    """Refuse, before anything starts, a layout that cannot serve."""
    count = settings.duplex_front_ends
    other = ("llm_front_ends", settings.llm_front_ends)
    stepper_pod.check(count, settings.backend, "moshi", other, settings.capacity)


def shares(settings: Stage0Settings) -> list[tuple[Stage0Settings, range]]:
    """Each front end's own settings and its rows: its share of the capacity."""
    return pod.shares(settings, settings.duplex_front_ends)


def supervise(settings: Stage0Settings, serve: Serve) -> None:
    """The stepper and its front ends, until SIGTERM or SIGINT (then return),
    or until the model fails (then exit non-zero)."""
    check(settings)
    stepper_pod.supervise(_run(settings, serve))


async def _run(settings: Stage0Settings, serve: Serve) -> str | None:
    registry = metrics.service_registry()
    stage_metrics = Stage0Metrics(registry)
    stage_metrics.capacity.set(settings.capacity)
    metrics.serve(registry, settings.metrics_port + settings.duplex_front_ends)
    shared = SharedRows.create(settings.capacity, settings.duplex_jitter_ms)
    front_ends = [
        stepper_pod.FrontEndProcess(
            index,
            "stage0-front-end",
            functools.partial(run_front_end, own, serve),
            functools.partial(StepperLink, layout=shared.layout, rows=rows),
        )
        for index, (own, rows) in enumerate(shares(settings))
    ]

    @contextlib.asynccontextmanager
    async def open_stepper(fail: Callable[[str], None]) -> AsyncIterator[stepper_pod.Stepper[Any]]:
        # torch and moshi load in the stepper only: the front ends never import them.
        from antiphon.stage0.backends.moshi.clock import LockstepClock
        from antiphon.stage0.backends.moshi.engines import load_lockstep, torch_threads
        from antiphon.stage0.backends.moshi.stepper import Stepper

        rings = [AudioRing(shared, row) for row in range(settings.capacity)]
        lockstep = await load_lockstep(settings, stage_metrics, audio=rings.__getitem__)
        stepper = Stepper(lockstep, rings, StepSlots(shared), stage_metrics)
        clock = LockstepClock(
            stepper,
            thread_setup=torch_threads(settings.duplex_threads),
            on_failure=lambda: fail("its model failed a step"),
        )
        stepper.on_open = clock.wake
        clock.start()
        try:
            yield stepper
        finally:
            await clock.close()

    grace_s = settings.shutdown_grace_s + CLOSE_S
    return await stepper_pod.run(front_ends, open_stepper, shared, grace_s)


def run_front_end(settings: Stage0Settings, serve: Serve, link: StepperLink) -> None:
    """One front end's process: a stage0 worker whose engines are the stepper's."""
    pod.stop_with_parent()
    bootstrap.configure("stage0", settings)
    engines: LoadEngines = link.load
    asyncio.run(serve(settings, None, engines=engines))
