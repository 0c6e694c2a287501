"""A socket's outbox: bounded in bytes, a goodbye past the bound, nothing left behind."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry

from antiphon.gateway.connection.outbox import Outbox
from antiphon.gateway.metrics import GatewayMetrics


def frame(n: int) -> dict[str, str]:
    """An event whose JSON is exactly `n` bytes."""
    base = len(json.dumps({"type": "x", "pad": ""}, separators=(",", ":")))
    return {"type": "x", "pad": "p" * (n - base)}


def outbox(limit: int) -> tuple[Outbox, GatewayMetrics]:
    metrics = GatewayMetrics(CollectorRegistry())
    return Outbox(metrics, limit_bytes=limit), metrics


def gauge(metrics: GatewayMetrics) -> float:
    return float(metrics.outbox_bytes._value.get())


async def test_a_frame_past_the_limit_is_refused_and_nothing_of_it_is_kept() -> None:
    box, metrics = outbox(100)
    assert box.put(frame(60))
    assert not box.put(frame(41))
    assert box.bytes == 60 == gauge(metrics)
    assert box.put(frame(40))
    assert box.bytes == 100


async def test_frames_come_out_in_order_and_free_their_bytes() -> None:
    box, metrics = outbox(1000)
    box.put({"type": "a"})
    box.put({"type": "b"})
    box.close()
    got = [await box.get(), await box.get(), await box.get()]
    assert [f[0] if f else None for f in got] == ["a", "b", None]
    assert box.bytes == 0 == gauge(metrics)


async def test_a_slow_readers_goodbye_goes_ahead_of_its_dropped_backlog() -> None:
    box, metrics = outbox(100)
    box.put(frame(90))
    box.close([{"type": "error", "pad": "p" * 200}], drop_backlog=True)
    first = await box.get()
    assert first is not None and first[0] == "error"
    assert await box.get() is None
    assert not box.put({"type": "late"})
    assert gauge(metrics) == 0


async def test_the_peak_is_exported_and_never_above_the_limit() -> None:
    box, metrics = outbox(100)
    box.put(frame(70))
    box.put(frame(70))  # refused
    assert metrics.outbox_peak._value.get() == 70


async def test_discard_forgets_what_was_never_written() -> None:
    box, metrics = outbox(1000)
    box.put(frame(300))
    box.discard()
    assert box.bytes == 0 == gauge(metrics)
