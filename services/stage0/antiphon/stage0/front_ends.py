"""Several stage0 workers in one pod, on one vLLM engine core (`llm_front_ends`).

Why: a worker is one event loop, and everything a session costs the worker
outside the engine runs on it: the gRPC streams, the VAD, each prompt built
and handed to vLLM, vLLM's own handling of every engine step's outputs, and
each delta passed on. When 128 sessions ask at the same instant on an H200
(issue 14, docs/performance.md), that loop is what the last of them queue on:
the engine's own TTFT inside the worker matched raw vLLM's, and the worker's
was tens of milliseconds over it at p95. vLLM's own server answers the same
way: several API-server processes on one engine core.

Each front end is a whole worker (main.serve): its own VAD, Whisper, gRPC
server at `listen`'s port + i, metrics at `metrics_port` + i, its own entry in
the worker registry, and its share of `capacity`; the session service sees K
workers and spreads sessions over them as over any. This process only
supervises (engine_host.py): it starts the engine core and the front ends,
and on SIGTERM each front end drains its own sessions before the engine core
stops. When a front end or the engine core dies, it stops the rest and exits
non-zero, so that the pod restarts whole; the sessions move to other
workers, as from any worker that dies.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any

from antiphon.common import bootstrap, pod
from antiphon.stage0.assets import locate
from antiphon.stage0.engine_config import EngineClient, EngineConfig
from antiphon.stage0.settings import Stage0Settings

# main.serve: one worker, given its settings and its way to the engine core.
Serve = Callable[[Stage0Settings, EngineClient | None], Coroutine[Any, Any, None]]

# After a front end's own drain (shutdown_grace_s), the time it may take to
# close its models before the supervisor kills it.
CLOSE_S = 10.0


def front_end_settings(settings: Stage0Settings, index: int) -> Stage0Settings:
    """Front end `index`'s own settings: its ports, and its share of the capacity."""
    return pod.worker_settings(settings, index, settings.llm_front_ends)


def check(settings: Stage0Settings) -> None:
    """Refuse, before anything starts, a layout that cannot serve."""
    count = settings.llm_front_ends
    if settings.backend != "cascade":
        raise SystemExit(
            f"llm_front_ends={count} shares a vLLM engine core; the {settings.backend!r} "
            "backend has none (set llm_front_ends=1)"
        )
    pod.check_shares(settings.capacity, count, "front ends")


def supervise(settings: Stage0Settings, serve: Serve) -> None:
    """Start the engine core and `llm_front_ends` workers on it; return once they
    have all stopped (after SIGTERM or SIGINT)."""
    check(settings)
    # vLLM loads here only: a synthetic or single-process worker never needs it.
    from antiphon.stage0 import engine_host

    signal.signal(signal.SIGTERM, _leave)
    signal.signal(signal.SIGINT, _leave)
    assets = locate(settings.model_cache, settings.llm_model)
    engine_host.serve(
        str(assets.llm_model),
        settings.llm_threads or 1,
        EngineConfig.of(settings),
        settings.llm_front_ends,
        run_front_end,
        (settings, serve),
        grace_s=settings.shutdown_grace_s + CLOSE_S,
    )


def _leave(signum: int, frame: FrameType | None) -> None:
    # Out of the wait for the front ends: engine_host then stops them in order.
    raise SystemExit(0)


def run_front_end(client: EngineClient, argument: tuple[Stage0Settings, Serve]) -> None:
    """One front end's process (spawned by vLLM's API-server manager)."""
    settings, serve = argument
    pod.stop_with_parent()
    own = front_end_settings(settings, client.index)
    bootstrap.configure("stage0", own)
    asyncio.run(serve(own, client))
