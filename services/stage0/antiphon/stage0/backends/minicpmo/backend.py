"""The `minicpmo` backend's declarations: MiniCPM-o 4.5's thinker in full
duplex.

It hears 16 kHz audio cut into one-second units and answers each, to listen
or to speak and what to say (a `ModelFrame` a unit, its text tokens for a
talker). It serves `capacity` sessions, each one resumable request on the
worker's vLLM engine.
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
UNIT_MS = 1000


def capabilities(settings: Stage0Settings) -> cpb.Capabilities:
    """A model-native duplex backend deciding once a unit. The user talking
    over it is the model's to hear; a cancel mutes the rest of its turn."""
    return model_native_capabilities(
        chunk_period_ms=UNIT_MS,
        input_sample_rate_hz=SAMPLE_RATE,
        supports_barge_in=True,
        consumes_video_frames=True,
    )


async def load(
    settings: Stage0Settings,
    metrics: Stage0Metrics,
    client: EngineClient | None,
    on_failure: Callable[[], None],
) -> Stage0Engines:
    # Imported here: vLLM loads with this backend only.
    from antiphon.stage0.backends.minicpmo.engines import MiniCPMoEngines

    return await MiniCPMoEngines.load(settings, metrics, on_failure)


BACKEND = Stage0Backend(
    name="minicpmo",
    input_sample_rate_hz=SAMPLE_RATE,
    capabilities=capabilities,
    load=load,
)
