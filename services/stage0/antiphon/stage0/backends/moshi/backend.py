"""The `moshi` backend's declarations: what it can do, what it hears, how it loads.

It hears 24 kHz audio (Mimi's rate) continuously, one 80 ms frame per model
step, and serves `capacity` sessions: the rows of its lockstep batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from antiphon.common.moshi_checkpoint import FRAME_MS, SAMPLE_RATE
from antiphon.stage0.backend import Stage0Backend, Stage0Engines, model_native_capabilities
from antiphon.v1 import common_pb2 as cpb

if TYPE_CHECKING:
    from antiphon.stage0.engine_config import EngineClient
    from antiphon.stage0.metrics import Stage0Metrics
    from antiphon.stage0.settings import Stage0Settings


def capabilities(settings: Stage0Settings) -> cpb.Capabilities:
    """A model-native duplex backend (the Moshi architecture): it hears 24 kHz
    audio continuously and decides itself when to speak, one 80 ms frame per
    step. The user talking over it is the model's own business (no barge-in),
    a commit only records the user item, and text goes into a running row's
    context (its text stream, which the model says)."""
    return model_native_capabilities(
        chunk_period_ms=FRAME_MS,
        input_sample_rate_hz=SAMPLE_RATE,
        supports_barge_in=False,
        supports_context_text=True,
    )


async def load(
    settings: Stage0Settings,
    metrics: Stage0Metrics,
    client: EngineClient | None,
    on_failure: Callable[[], None],
) -> Stage0Engines:
    """The model and its lockstep batch of `capacity` rows; `on_failure`: the
    model failed a step and the clock stopped. It has no vLLM engine core."""
    # Imported here: torch and moshi load with this backend only.
    from antiphon.stage0.backends.moshi.engines import DuplexEngines

    return await DuplexEngines.load(settings, metrics, on_failure=on_failure)


BACKEND = Stage0Backend(
    name="moshi",
    input_sample_rate_hz=SAMPLE_RATE,
    capabilities=capabilities,
    load=load,
)
