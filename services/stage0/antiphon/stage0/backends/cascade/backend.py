"""The `cascade` backend's declarations: what it can do, what it hears, how it loads.

It hears 16 kHz audio (the session's default rate) in chunks of any size and
reports listen decisions each `chunk_period_ms` (1000 by default) in the
native lane; it serves `capacity` sessions (measured by `make bench`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from antiphon.common import stage_audio
from antiphon.stage0.backend import Stage0Backend, Stage0Engines
from antiphon.v1 import common_pb2 as cpb

if TYPE_CHECKING:
    from antiphon.stage0.engine_config import EngineClient
    from antiphon.stage0.metrics import Stage0Metrics
    from antiphon.stage0.settings import Stage0Settings


def capabilities(settings: Stage0Settings) -> cpb.Capabilities:
    return cpb.Capabilities(
        implementation_level="cascade",
        supports_input_append=True,
        # Its VAD hears speech over a reply, and a cancel stops the reply's work.
        supports_barge_in=settings.supports_barge_in,
        chunk_period_ms=settings.chunk_period_ms,
        input_modes=["append_audio_chunk"],
    )


async def load(
    settings: Stage0Settings,
    metrics: Stage0Metrics,
    client: EngineClient | None,
    on_failure: Callable[[], None],
) -> Stage0Engines:
    """Its models (the LLM on an engine core of its own, or with `client` on
    the pod's shared one), each bound session a `CascadeSession`."""
    # Imported here: the LLM's and Whisper's libraries load with this backend only.
    from antiphon.stage0.backends.cascade.models import CascadeModels
    from antiphon.stage0.backends.cascade.worker import CascadeWorker

    models = await CascadeModels.load(settings, metrics, client)
    return CascadeWorker(models, settings, metrics)


BACKEND = Stage0Backend(
    name="cascade",
    input_sample_rate_hz=stage_audio.RATE,
    capabilities=capabilities,
    load=load,
)
