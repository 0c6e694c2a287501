"""The `nemotron` backend's declarations: Nemotron VoiceChat's listening half.

It hears 16 kHz audio continuously, one 80 ms frame per step, and serves
`capacity` sessions: the rows of its batch. Its frames carry the LLM's text
tokens, which stage1's `nemotron` backend speaks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from antiphon.stage0.backend import Stage0Backend, Stage0Engines, model_native_capabilities
from antiphon.v1 import common_pb2 as cpb

if TYPE_CHECKING:
    from antiphon.stage0.engine_config import EngineClient
    from antiphon.stage0.metrics import Stage0Metrics
    from antiphon.stage0.settings import Stage0Settings

SAMPLE_RATE = 16_000
FRAME_MS = 80


def capabilities(settings: Stage0Settings) -> cpb.Capabilities:
    """A model-native duplex backend: it decides itself when to speak; the
    reference's capabilities for this model (no barge-in: the user talking
    over it is the model's own business; tools)."""
    # A checkpoint with a function head calls tools, and takes their results
    # and other text into that channel.
    from antiphon.common.nemotron import checkpoint

    tools = checkpoint.has_function_head(settings.duplex_checkpoint)
    return model_native_capabilities(
        chunk_period_ms=FRAME_MS,
        input_sample_rate_hz=SAMPLE_RATE,
        supports_barge_in=False,
        supports_context_text=tools,
        supports_tool_calls=tools,
    )


async def load(
    settings: Stage0Settings,
    metrics: Stage0Metrics,
    client: EngineClient | None,
    on_failure: Callable[[], None],
) -> Stage0Engines:
    # Imported here: torch and NeMo load with this backend only.
    from antiphon.stage0.backends.nemotron.engines import NemotronEngines

    return await NemotronEngines.load(settings, metrics, on_failure=on_failure)


BACKEND = Stage0Backend(
    name="nemotron",
    input_sample_rate_hz=SAMPLE_RATE,
    capabilities=capabilities,
    load=load,
)
