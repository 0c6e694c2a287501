"""stage0 measures how long a Generate waits in the worker before the engine gets
its prompt: the share of TTFT that no engine clock sees (bench/gpu.py reads it)."""

from __future__ import annotations

import asyncio
import time

import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage0.backends.cascade.listening.turn import TurnBatcher
from antiphon.stage0.backends.cascade.listening.vad import VadBatcher
from antiphon.stage0.backends.cascade.session import CascadeSession
from antiphon.stage0.backends.synthetic.engines import SyntheticEngines
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

# The synthetic backend still runs the real Silero VAD and Smart Turn.
pytestmark = pytest.mark.models

WAIT = "antiphon_stage0_generate_wait_seconds"


async def _answered(block_s: float) -> CollectorRegistry:
    """One Generate on a synthetic cascade session, the loop held for `block_s` after it arrives."""
    settings = Stage0Settings(synthetic_ttft_ms=1, synthetic_token_ms=1)
    engines = SyntheticEngines(settings)
    registry = CollectorRegistry()
    done = asyncio.Event()

    def emit(event: pb.Stage0Event) -> None:
        if event.WhichOneof("kind") == "done":
            done.set()

    session = CascadeSession(
        engines,
        settings,
        emit,
        Stage0Metrics(registry),
        VadBatcher(engines.vad),
        TurnBatcher(engines.turn),
    )
    session.handle(pb.Stage0Request(open=pb.Stage0Open(session_id="s", lane=pb.LANE_MANUAL)))
    session.handle(
        pb.Stage0Request(
            generate=pb.Generate(
                response_id="r", messages=[cpb.ChatMessage(role="user", content="hello")]
            )
        )
    )
    # Other sessions' work on the same loop, before this one's task runs.
    time.sleep(block_s)  # noqa: ASYNC251  (the point: the loop is blocked)
    await asyncio.wait_for(done.wait(), 10)
    await session.close()
    return registry


async def test_a_generate_that_waited_on_a_busy_loop_says_how_long() -> None:
    quick = await _answered(0.0)
    held = await _answered(0.3)
    assert quick.get_sample_value(f"{WAIT}_count") == 1
    assert held.get_sample_value(f"{WAIT}_count") == 1
    assert (quick.get_sample_value(f"{WAIT}_sum") or 0) < 0.1
    assert (held.get_sample_value(f"{WAIT}_sum") or 0) >= 0.3
