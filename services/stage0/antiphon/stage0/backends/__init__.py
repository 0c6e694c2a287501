"""stage0's backends by name (the worker's `backend` setting, `ANTIPHON_BACKEND`).

Each is a package here; `BACKENDS` maps its name to the module holding its
`Stage0Backend` (backend.py), imported only when a worker asks for that
backend: a synthetic worker never imports the cascade's LLM, nor a cascade
worker torch's Moshi. Adding one: a new package with a `backend.py` whose
`BACKEND` is a `Stage0Backend`, and one row here.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from antiphon.stage0.backend import Stage0Backend

BACKENDS: Mapping[str, str] = {
    # Silero VAD, Smart Turn, Whisper and an LLM on vLLM or llama.cpp.
    "cascade": "antiphon.stage0.backends.cascade.backend",
    # MiniCPM-o 4.5's thinker in full duplex, a one-second unit at a time, on vLLM.
    "minicpmo": "antiphon.stage0.backends.minicpmo.backend",
    # A model-native duplex model of the Moshi architecture (Moshi, PersonaPlex).
    "moshi": "antiphon.stage0.backends.moshi.backend",
    # Nemotron VoiceChat's listening half (NeMo's perception and NemotronH LLM).
    "nemotron": "antiphon.stage0.backends.nemotron.backend",
    # The cascade's VAD and turn model, scripted ASR and LLM (load and fault tests).
    "synthetic": "antiphon.stage0.backends.synthetic.backend",
}


class UnknownBackendError(SystemExit):
    """A worker configured with a backend no row names: it cannot start."""


def get(name: str) -> Stage0Backend:
    """The backend registered as `name`, its module imported now."""
    module = BACKENDS.get(name)
    if module is None:
        raise UnknownBackendError(
            f"unknown stage0 backend {name!r}; use one of {', '.join(sorted(BACKENDS))}"
        )
    backend = importlib.import_module(module).BACKEND
    if not isinstance(backend, Stage0Backend) or backend.name != name:
        raise TypeError(f"{module}.BACKEND is not the Stage0Backend named {name!r}")
    return backend
