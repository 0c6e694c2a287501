"""A service's event loop reports how late it ran what was due."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry

from antiphon.common.loop_lag import lag_histogram, watching

LAG = "antiphon_test_event_loop_lag_seconds"


async def test_a_blocked_loop_shows_as_lag_and_an_idle_one_does_not() -> None:
    registry = CollectorRegistry()
    histogram = lag_histogram("test", registry)
    async with watching(histogram, interval_s=0.02):
        await asyncio.sleep(0.2)
        idle = registry.get_sample_value(f"{LAG}_bucket", {"le": "0.1"})
        idle_count = registry.get_sample_value(f"{LAG}_count")
        # Something on the loop runs 0.3 s without yielding.
        time.sleep(0.3)  # noqa: ASYNC251  (the point: the loop is blocked)
        await asyncio.sleep(0.1)
    assert idle_count and idle == idle_count, "an idle loop ran no timer 100 ms late"
    late = (registry.get_sample_value(f"{LAG}_count") or 0) - (
        registry.get_sample_value(f"{LAG}_bucket", {"le": "0.2"}) or 0
    )
    assert late == 1, "the blocked stretch is one late timer of over 200 ms"
