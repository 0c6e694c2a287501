"""Traces: one turn is one trace across gateway, session, stage0 and stage1."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator

import pytest
from stack import LocalStack, Ports

from antiphon.common import tracing
from tests.deploy.otlp import ReceivedSpan, Receiver, receiver
from tests.support.realtime import one_turn
from tests.support.speech import silence
from tests.support.stacks import started

SERVICES = {"antiphon-gateway", "antiphon-session", "antiphon-stage0", "antiphon-stage1"}
# Each hop's server span: the gateway's connection, then a stage binding per stage.
SPANS = {"gateway.connection", "stage0.bind", "stage1.bind"}


@pytest.fixture(scope="module")
def traced(request: pytest.FixtureRequest, redis_url: str) -> Iterator[tuple[LocalStack, Receiver]]:
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
        # A service that fails to start does not leave the others running.
        with started(request, stack):
            yield stack, collector


def connected(spans: list[ReceivedSpan]) -> list[ReceivedSpan] | None:
    """The spans of the one trace the gateway's connection span roots, when that
    trace holds all four services and is one tree (every span's parent is in it:
    each hop carried the context on); else None."""
    roots = [s for s in spans if s.name == "gateway.connection"]
    if len(roots) != 1:
        return None
    turn = [s for s in spans if s.trace_id == roots[0].trace_id]
    ids = {s.span_id for s in turn}
    if (
        {s.service for s in turn} != SERVICES
        or not SPANS <= {s.name for s in turn}
        or any(s.parent_span_id not in ids for s in turn if s is not roots[0])
    ):
        return None
    return turn


@pytest.mark.stack
async def test_one_turn_is_one_trace_across_all_four_tiers(
    traced: tuple[LocalStack, Receiver],
) -> None:
    stack, collector = traced
    await one_turn(stack.ports.gateway, silence(600))
    spans = await asyncio.to_thread(
        collector.wait_until, lambda spans: connected(spans) is not None, 30
    )
    turn = connected(spans)
    assert turn is not None, f"spans received: {sorted((s.service, s.name) for s in spans)}"
    # The stage spans hang under the session's span, not straight under the gateway's.
    by_id = {s.span_id: s for s in turn}
    for name in ("stage0.bind", "stage1.bind"):
        (stage,) = [s for s in turn if s.name == name]
        assert by_id[stage.parent_span_id].service == "antiphon-session", name


def test_otlp_target_is_plaintext_unless_https() -> None:
    assert tracing.otlp_target("http://collector:4317") == ("http://collector:4317", True)
    assert tracing.otlp_target("collector:4317") == ("http://collector:4317", True)
    assert tracing.otlp_target("https://otel.example:4317") == ("https://otel.example:4317", False)
    with pytest.raises(ValueError):
        tracing.otlp_target("grpc://collector:4317")


def test_nothing_is_exported_without_an_endpoint() -> None:
    """No endpoint: spans are recorded (the context still propagates) but no
    exporter is even loaded, so nothing can leave the process."""
    code = (
        "import sys\n"
        "from antiphon.common import tracing\n"
        "provider = tracing.configure('probe', '')\n"
        "with provider.get_tracer('t').start_as_current_span('s') as span:\n"
        "    assert span.get_span_context().is_valid\n"
        "    assert tracing.inject_metadata()[0][0] == 'traceparent'\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry.exporter')]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
