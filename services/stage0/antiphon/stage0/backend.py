"""What a stage0 backend is to the worker: what it declares and what it loads.

A backend is a package under `backends/` whose `backend.py` holds one
`Stage0Backend` (its `BACKEND`); the registry (`backends/__init__.py`) imports
it only when a worker's `backend` setting names it. That module stays light
(no model library at import): the servicer reads its declarations before the
engines load, and its `load` imports what the engines need.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from antiphon.common.binding import BoundSession
from antiphon.common.outbox import Merge
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb

if TYPE_CHECKING:
    from antiphon.stage0.engine_config import EngineClient
    from antiphon.stage0.metrics import Stage0Metrics
    from antiphon.stage0.settings import Stage0Settings


class Stage0Engines(Protocol):
    """A backend's engines, loaded once per worker and shared by its sessions."""

    @property
    def merge(self) -> Merge[pb.Stage0Event] | None:
        """How events still unsent on a session's stream fold together (outbox.py);
        None: each goes as it is."""

    def bind(self, emit: Callable[[pb.Stage0Event], None]) -> BoundSession[pb.Stage0Request]:
        """One bound session: its requests go to `handle`, its events to `emit`."""

    async def close(self) -> None: ...


# Loads a backend's engines: (settings, metrics, client, on_failure). `client`:
# the pod's shared vLLM engine core (front_ends.py), None for one of its own;
# `on_failure`: called if the engines die while serving (the worker then stops,
# so that its sessions move to another).
LoadEngines = Callable[
    ["Stage0Settings", "Stage0Metrics", "EngineClient | None", Callable[[], None]],
    Awaitable[Stage0Engines],
]


@dataclass(frozen=True)
class Stage0Backend:
    """A backend's declarations and its loader.

    The worker serves `settings.capacity` sessions whatever the backend (a
    bind past it is refused, RESOURCE_EXHAUSTED); the chunk period is the
    capabilities' `chunk_period_ms`."""

    name: str
    # The rate of the PCM16 mono audio its sessions hear (the session
    # resamples to it): on the wire as `capabilities.input_sample_rate_hz`
    # where the backend sets it, 16 kHz where it is unset.
    input_sample_rate_hz: int
    # What `Describe` answers, for the worker's settings.
    capabilities: Callable[[Stage0Settings], cpb.Capabilities]
    load: LoadEngines


def model_native_capabilities(
    *, chunk_period_ms: int, input_sample_rate_hz: int, **declared: bool
) -> cpb.Capabilities:
    """What every model-native duplex backend declares (it hears appended
    audio continuously and decides itself when to speak, once a
    `chunk_period_ms`), with what sets it apart (`declared`: its
    `supports_*` and `consumes_*` flags)."""
    return cpb.Capabilities(
        implementation_level="model_native_duplex",
        model_native=True,
        supports_input_append=True,
        chunk_period_ms=chunk_period_ms,
        input_sample_rate_hz=input_sample_rate_hz,
        input_modes=["append_audio_chunk"],
        **declared,
    )
