"""Several stage1 workers in one pod (`worker_processes`), sharing its device.

Why: a worker is one interpreter, and everything its sessions cost outside the
device runs under that one lock: the gRPC streams, Piper's phonemizer, each
clause's resampling, and the batch loop's own dispatch of the voice graph's
operators (backends/piper/voice_batch.py), which on a GPU is most of a batch's time. On an
H200 at 128 sessions one worker's process used a core while the card idled
between batches (docs/performance.md, "The whole stack on one H200"). K
processes dispatch K batches at once.

Each is a whole worker (main.serve): its own voice, gRPC server at `listen`'s
port + i, metrics at `metrics_port` + i, registry entry and share of
`capacity` (common/pod.py). This process only supervises: on SIGTERM each
worker drains its own sessions; when one dies the rest are stopped and this
process exits non-zero, so that the pod restarts whole and its sessions move
to other workers, as from any worker that dies.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
import sys
from collections.abc import Callable, Coroutine
from multiprocessing.connection import wait
from types import FrameType
from typing import Any

from antiphon.common import bootstrap, pod
from antiphon.stage1.settings import Stage1Settings

# main.serve: one worker, given its settings.
Serve = Callable[[Stage1Settings], Coroutine[Any, Any, None]]

# After a worker's own drain (shutdown_grace_s), the time it may take to close
# its voice before it is killed.
CLOSE_S = 10.0


def check(settings: Stage1Settings) -> None:
    """Refuse, before anything starts, a layout that cannot serve."""
    count = settings.worker_processes
    if settings.backend in ("mimi", "nemotron"):
        raise SystemExit(
            f"worker_processes={count}: the {settings.backend} backend steps every session "
            "in one lockstep batch (set worker_processes=1)"
        )
    pod.check_shares(settings.capacity, count, "workers")


def supervise(settings: Stage1Settings, serve: Serve) -> None:
    """Start `worker_processes` workers; return once all have stopped after
    SIGTERM or SIGINT, or exit 1 when one stopped on its own."""
    check(settings)
    count = settings.worker_processes
    # Spawned, not forked: each worker starts its own device context.
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_run, args=(settings, i, serve), name=f"stage1-{i}")
        for i in range(count)
    ]
    signal.signal(signal.SIGTERM, _leave)
    signal.signal(signal.SIGINT, _leave)
    asked = False
    try:
        for worker in workers:
            worker.start()
        wait([w.sentinel for w in workers])
    except SystemExit:
        asked = True
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        pod.stop_processes(workers, settings.shutdown_grace_s + CLOSE_S)
    if not asked:
        died = [f"{w.name} ({w.exitcode})" for w in workers]
        sys.exit(f"a stage1 worker stopped; the pod stops with it: {', '.join(died)}")


def _leave(signum: int, frame: FrameType | None) -> None:
    # Out of the wait for the workers: they are then drained in order.
    raise SystemExit(0)


def _run(settings: Stage1Settings, index: int, serve: Serve) -> None:
    """One worker's process."""
    pod.stop_with_parent()
    own = pod.worker_settings(settings, index, settings.worker_processes)
    bootstrap.configure("stage1", own)
    asyncio.run(serve(own))
