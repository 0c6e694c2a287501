"""stage0's backend registry: a worker names its backend, the registry imports
that backend's declarations only then, and an unknown name stops the worker
with the names it could have used."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from antiphon.stage0 import backends
from antiphon.stage0.backend import Stage0Backend
from antiphon.stage0.settings import Stage0Settings

MODEL_LIBRARIES = ("torch", "vllm", "moshi", "onnxruntime", "ctranslate2", "faster_whisper")


@pytest.mark.parametrize("name", sorted(backends.BACKENDS))
def test_each_registered_backend_declares_itself_under_its_own_name(name: str) -> None:
    backend = backends.get(name)
    assert isinstance(backend, Stage0Backend)
    assert backend.name == name
    caps = backend.capabilities(Stage0Settings(backend=name))
    assert caps.implementation_level
    # What the session resamples to: the declared rate, or 16 kHz where unset.
    assert (caps.input_sample_rate_hz or 16_000) == backend.input_sample_rate_hz


def test_an_unknown_backend_stops_the_worker_naming_the_known_ones() -> None:
    with pytest.raises(SystemExit) as exc:
        backends.get("whisperx")
    message = str(exc.value)
    assert "'whisperx'" in message
    assert all(name in message for name in backends.BACKENDS)


def test_the_registry_and_every_declaration_load_no_model_library() -> None:
    """A backend's engines (and their libraries) load with `load` only."""
    probe = (
        "import json, sys\n"
        "from antiphon.stage0 import backends\n"
        "for name in backends.BACKENDS: backends.get(name)\n"
        f"libraries = {MODEL_LIBRARIES!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in libraries)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
