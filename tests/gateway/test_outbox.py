"""A socket's outbox: bounded in bytes, a goodbye past the bound, nothing left behind."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry

from antiphon.gateway.connection.connection_state import Closing
from antiphon.gateway.connection.outbox import Outbox
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.v1 import session_pb2 as spb

BYE = Closing(1008, "slow_consumer")


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
    box.close(Closing())
    got = [await box.get(), await box.get(), await box.get()]
    assert got[:2] == [("a", '{"type":"a"}'), ("b", '{"type":"b"}')]
    assert got[2] == Closing(1000, "")
    assert box.bytes == 0 == gauge(metrics)


async def test_audio_keeps_its_place_among_the_events_as_the_session_typed_it() -> None:
    box, metrics = outbox(1000)
    delta = spb.AudioDelta(audio=b"\x01\x02" * 100)
    box.put({"type": "a"})
    assert box.put_audio(delta)
    assert box.bytes == len('{"type":"a"}') + 200
    assert not box.put_audio(spb.AudioDelta(audio=bytes(1000)))  # past the limit: refused
    box.put({"type": "b"})
    box.close(Closing())
    got = [await box.get() for _ in range(4)]
    assert got[1] is delta
    assert [g[0] for g in (got[0], got[2]) if isinstance(g, tuple)] == ["a", "b"]
    assert box.bytes == 0 == gauge(metrics)


async def test_a_slow_readers_goodbye_goes_ahead_of_its_dropped_backlog() -> None:
    box, metrics = outbox(100)
    box.put(frame(90))
    box.close(BYE, [{"type": "error", "pad": "p" * 200}], drop_backlog=True)
    first = await box.get()
    assert isinstance(first, tuple) and first[0] == "error"
    assert await box.get() is BYE  # the close the connection decided, after its last frame
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
