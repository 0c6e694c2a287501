"""The gateway and session tiers never load model code, and the client no
server code at all, however they are imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {
    "antiphon.gateway": REPO / "services" / "gateway" / "antiphon" / "gateway",
    "antiphon.session": REPO / "services" / "session" / "antiphon" / "session",
    "antiphon.client": REPO / "client" / "antiphon" / "client",
}
FORBIDDEN = (
    "torch",
    "vllm",
    "onnxruntime",
    "ctranslate2",
    "faster_whisper",
    "piper",
    "transformers",
)

_PROBE = """
import importlib, json, sys
for name in sys.argv[2:]:
    importlib.import_module(name)
forbidden = json.loads(sys.argv[1])
loaded = sorted(m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in forbidden))
print(json.dumps(loaded))
"""


def _modules(package: str) -> list[str]:
    folder = PACKAGES[package]
    names = [package]
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        if parts:
            names.append(".".join([package, *parts]))
    return names


def _loaded(forbidden: tuple[str, ...], modules: list[str]) -> list[str]:
    """The `forbidden` libraries a fresh interpreter holds after importing `modules`."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(forbidden), *modules],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_importing_every_module_loads_no_model_library(package: str) -> None:
    modules = _modules(package)
    assert len(modules) > 3, modules  # the walk found the package's modules
    loaded = _loaded(FORBIDDEN, modules)
    assert loaded == [], f"{package} pulled in model libraries: {loaded}"


def test_a_synthetic_stage0_worker_loads_neither_vllm_nor_torch() -> None:
    """The synthetic backend (load and fault tests) starts in a second: the LLM
    engine and its libraries load only with the cascade's models."""
    worker = [
        "antiphon.stage0.main",
        "antiphon.stage0.service",
        "antiphon.stage0.backends.synthetic.backend",
        "antiphon.stage0.backends.synthetic.engines",
        "antiphon.stage0.backends.cascade.worker",
    ]
    assert _loaded(("torch", "vllm", "transformers"), worker) == []


def test_the_client_loads_no_server_code_no_grpc_and_no_sound_library() -> None:
    """`pip install antiphon-client` is enough to run it: it needs nothing a
    server tier needs, and a sound library only for a real microphone."""
    server = (
        "antiphon.v1",
        "antiphon.common",
        "antiphon.gateway",
        "antiphon.session",
        "antiphon.stage0",
        "antiphon.stage1",
        "grpc",
        "google.protobuf",
        "redis",
        "starlette",
        "sounddevice",
    )
    assert _loaded(FORBIDDEN + server, _modules("antiphon.client")) == []
