"""A `mimi` worker as one stepper and several front-end processes
(`duplex_front_ends`), as stage0's `moshi` worker is
(stage0/duplex_front_ends.py).

Why: the decode is one batch for every session, but each session's frame in
and 80 ms of audio out every 80 ms ride one event loop and one GIL beside
it; behind a stage0 split into front ends, one stage1 process was the next
wall (docs/performance.md). Here K front ends carry the streams and the
sessions (frames/session.py: responses, resampling, text marks), and
the stepper (this process) the decoder (backends/mimi/stepper.py).

Each front end is a whole stage1 worker (main.serve): its gRPC server at
`listen`'s port + i, metrics at `metrics_port` + i, its own health, registry
entry and share of `capacity` (common/pod.py), and so its own rows of the
batch. The stepper's metrics (the step histogram) are at `metrics_port` + K.
Between them (backends/mimi/shared_rows.py, crossing.py): codes and audio in
shared memory, one notice per step, a session's coming and going by a pipe.
The processes, their restarts and their stop are common/stepper/pod.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from antiphon.common import bootstrap, metrics, pod
from antiphon.common.stepper import pod as stepper_pod
from antiphon.stage1.backends.mimi.front_end import StepperLink
from antiphon.stage1.backends.mimi.shared_rows import (
    CARDINALITY,
    CODEBOOKS,
    MAX_CODEBOOKS,
    CodeRing,
    SharedRows,
)
from antiphon.stage1.metrics import DuplexMetrics
from antiphon.stage1.processes import CLOSE_S
from antiphon.stage1.settings import Stage1Settings

# main.serve: one worker, given its settings (and a front end's backend).
Serve = Callable[..., Coroutine[Any, Any, None]]

# While gathering a step, how often the stepper looks at rows its front ends
# write: they wake it once a step, not once a frame.
POLL_S = 0.001


def check(settings: Stage1Settings) -> None:
    """Refuse, before anything starts, a layout that cannot serve."""
    count = settings.duplex_front_ends
    other = ("worker_processes", settings.worker_processes)
    stepper_pod.check(count, settings.backend, "mimi", other, settings.capacity)


def shares(settings: Stage1Settings) -> list[tuple[Stage1Settings, range]]:
    """Each front end's own settings and its rows: its share of the capacity."""
    return pod.shares(settings, settings.duplex_front_ends)


def supervise(settings: Stage1Settings, serve: Serve) -> None:
    """The stepper and its front ends, until SIGTERM or SIGINT (then return),
    or until the decoder fails (then exit non-zero)."""
    check(settings)
    stepper_pod.supervise(_run(settings, serve))


async def _run(settings: Stage1Settings, serve: Serve) -> str | None:
    registry = metrics.service_registry()
    duplex_metrics = DuplexMetrics(registry)
    metrics.serve(registry, settings.metrics_port + settings.duplex_front_ends)
    shared = SharedRows.create(settings.capacity)
    front_ends = [
        stepper_pod.FrontEndProcess(
            index,
            "stage1-front-end",
            functools.partial(run_front_end, own, serve),
            functools.partial(StepperLink, layout=shared.layout, rows=rows),
        )
        for index, (own, rows) in enumerate(shares(settings))
    ]

    @contextlib.asynccontextmanager
    async def open_stepper(fail: Callable[[str], None]) -> AsyncIterator[stepper_pod.Stepper[Any]]:
        # torch and moshi load in the stepper only: the front ends never import them.
        from antiphon.stage1.backends.mimi import lockstep as mimi_lockstep
        from antiphon.stage1.backends.mimi.stepper import Stepper

        lockstep = await asyncio.to_thread(
            mimi_lockstep.load, settings, duplex_metrics, poll_s=POLL_S
        )
        if lockstep.num_codebooks > MAX_CODEBOOKS:
            raise SystemExit(f"{lockstep.num_codebooks} codebooks: a ring has {MAX_CODEBOOKS}")
        shared.model[CODEBOOKS] = lockstep.num_codebooks
        shared.model[CARDINALITY] = lockstep.cardinality
        rings = [CodeRing(shared, row) for row in range(settings.capacity)]
        stepper = Stepper(lockstep, rings, shared.slots)

        def failed() -> None:
            stepper.fail("the decoder failed a step")
            fail("its decoder failed a step")

        lockstep.start(failed)
        try:
            yield stepper
        finally:
            await lockstep.close()

    grace_s = settings.shutdown_grace_s + CLOSE_S
    return await stepper_pod.run(front_ends, open_stepper, shared, grace_s)


def run_front_end(settings: Stage1Settings, serve: Serve, link: StepperLink) -> None:
    """One front end's process: a stage1 worker whose decoder is the stepper's."""
    pod.stop_with_parent()
    bootstrap.configure("stage1", settings)
    asyncio.run(serve(settings, backend=link.backend()))
