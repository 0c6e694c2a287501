"""The `synthetic` backend's declarations: the cascade's, with scripted engines.

It declares what the cascade does (16 kHz input, the same capabilities) and
serves its sessions through the cascade's pipeline; only its ASR and LLM are
scripted (engines.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from antiphon.common import stage_audio
from antiphon.stage0.backend import Stage0Backend, Stage0Engines
from antiphon.stage0.backends.cascade.backend import capabilities

if TYPE_CHECKING:
    from antiphon.stage0.engine_config import EngineClient
    from antiphon.stage0.metrics import Stage0Metrics
    from antiphon.stage0.settings import Stage0Settings


async def load(
    settings: Stage0Settings,
    metrics: Stage0Metrics,
    client: EngineClient | None,
    on_failure: Callable[[], None],
) -> Stage0Engines:
    from antiphon.stage0.backends.cascade.worker import CascadeWorker
    from antiphon.stage0.backends.synthetic.engines import SyntheticEngines

    return CascadeWorker(SyntheticEngines(settings), settings, metrics)


BACKEND = Stage0Backend(
    name="synthetic",
    input_sample_rate_hz=stage_audio.RATE,
    capabilities=capabilities,
    load=load,
)
