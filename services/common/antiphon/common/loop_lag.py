"""How late a service's event loop runs what is due.

Everything a gRPC service does (its streams, and for stage0 vLLM's front end)
shares one asyncio loop. When that loop is saturated every request waits
behind the others, and no per-request clock shows it: a timer that should
fire every `interval_s` and fires late does. The lateness is observed into a
histogram of the service's own registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from prometheus_client import CollectorRegistry, Histogram

from antiphon.common.metrics import LATENCY_BUCKETS


def lag_histogram(service: str, registry: CollectorRegistry) -> Histogram:
    """`antiphon_<service>_event_loop_lag_seconds`, in the service's own registry."""
    return Histogram(
        f"antiphon_{service}_event_loop_lag_seconds",
        "How late the event loop ran a timer that was due (a saturated loop delays every request)",
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )


async def watch(histogram: Histogram, interval_s: float = 0.1) -> None:
    """Observe the loop's lateness every `interval_s`, until cancelled."""
    while True:
        due = time.perf_counter() + interval_s
        await asyncio.sleep(interval_s)
        histogram.observe(max(0.0, time.perf_counter() - due))


@contextlib.asynccontextmanager
async def watching(histogram: Histogram, interval_s: float = 0.1) -> AsyncIterator[None]:
    """`watch` for the duration of the block."""
    task = asyncio.create_task(watch(histogram, interval_s))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
