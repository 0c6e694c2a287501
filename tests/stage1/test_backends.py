"""The stage1 backend registry: a name picks a module, imported only then."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from antiphon.stage1 import backends
from antiphon.stage1.backends import Backend, UnknownBackendError
from antiphon.v1 import common_pb2 as cpb


def test_every_registered_backend_loads_as_a_backend() -> None:
    for name in backends.BACKENDS:
        backend = backends.load(name)
        assert isinstance(backend, Backend), name
        assert isinstance(backend.capabilities, cpb.Capabilities), name


def test_an_unknown_backend_fails_naming_the_known_ones() -> None:
    with pytest.raises(UnknownBackendError) as caught:
        backends.load("espeak")
    message = str(caught.value)
    assert "'espeak'" in message
    assert all(name in message for name in ("piper", "synthetic", "mimi"))


def test_the_text_backends_are_not_model_native_and_the_frame_backends_are() -> None:
    assert not backends.load("piper").capabilities.model_native
    assert not backends.load("synthetic").capabilities.model_native
    assert backends.load("mimi").capabilities.model_native
    assert backends.load("nemotron").capabilities.model_native


_PROBE = """
import json, sys
from antiphon.stage1 import backends
backends.load(sys.argv[1])
libraries = ("onnxruntime", "piper", "torch", "moshi", "nemo")
print(json.dumps(sorted(m for m in libraries if m in sys.modules)))
"""


@pytest.mark.parametrize(("name", "loaded"), [("synthetic", []), ("mimi", []), ("nemotron", [])])
def test_a_backend_imports_only_its_own_model_libraries(name: str, loaded: list[str]) -> None:
    """`synthetic` never loads Piper's onnxruntime; `mimi` loads torch only
    when it builds its decoder, never Piper; `nemotron` torch and NeMo only
    when it builds its model."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, name], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == loaded
