"""Traces: one turn is one trace across gateway, session, stage0 and stage1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stack import LocalStack, Ports

from antiphon.common import tracing
from tests.deploy.otlp import Receiver, receiver
from tests.support.realtime import RealtimeClient
from tests.support.speech import silence

SPANS = {"gateway.connection", "session.open", "stage0.bind", "stage1.bind"}


@pytest.fixture(scope="module")
def traced(redis_url: str) -> Iterator[tuple[LocalStack, Receiver]]:
    """A synthetic stack whose four services export OTLP to a receiver on loopback."""
    with receiver() as (collector, port):
        stack = LocalStack(
            ports=Ports.free(),
            redis_url=f"{redis_url.rsplit('/', 1)[0]}/7",
            extra_env={
                "ANTIPHON_BACKEND": "synthetic",
                "ANTIPHON_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
                # Ship each span within 100 ms instead of the default 5 s.
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            },
        )
        stack.start(timeout_s=180)
        try:
            yield stack, collector
        finally:
            stack.stop()


async def test_one_turn_is_one_trace_across_all_four_tiers(
    traced: tuple[LocalStack, Receiver],
) -> None:
    stack, collector = traced
    client = await RealtimeClient.connect(f"ws://127.0.0.1:{stack.ports.gateway}/v1/realtime")
    try:
        await client.open(type="realtime", audio={"input": {"turn_detection": None}})
        await client.append(silence(600))
        await client.send("input_audio_buffer.commit")
        await client.send("response.create")
        await client.response_cycle()
    finally:
        await client.close()
    spans = collector.wait_for(SPANS, timeout_s=30)
    by_name = {s.name: s for s in spans if s.name in SPANS}
    assert set(by_name) == SPANS, f"spans received: {sorted({s.name for s in spans})}"
    assert len({s.trace_id for s in by_name.values()}) == 1, by_name
    services = {s.service for s in spans if s.trace_id == by_name["gateway.connection"].trace_id}
    assert services == {
        "antiphon-gateway",
        "antiphon-session",
        "antiphon-stage0",
        "antiphon-stage1",
    }
    # Each hop's span is the child of the span that made the call.
    assert by_name["session.open"].parent_span_id == by_name["gateway.connection"].span_id
    assert by_name["stage0.bind"].parent_span_id == by_name["session.open"].span_id
    assert by_name["stage1.bind"].parent_span_id == by_name["session.open"].span_id


def test_otlp_target_is_plaintext_unless_https() -> None:
    assert tracing.otlp_target("http://collector:4317") == ("http://collector:4317", True)
    assert tracing.otlp_target("collector:4317") == ("http://collector:4317", True)
    assert tracing.otlp_target("https://otel.example:4317") == ("https://otel.example:4317", False)
    with pytest.raises(ValueError):
        tracing.otlp_target("grpc://collector:4317")
