"""The committed stubs are exactly what `make proto` generates from protos/ (stale-stub check)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROTOS = sorted((REPO / "protos" / "antiphon" / "v1").glob("*.proto"))
COMMITTED = REPO / "services" / "common" / "antiphon" / "v1"


def _generate(out: Path) -> None:
    # The Makefile `proto` target, flag for flag, run from the repository root.
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        "-I",
        "protos",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *(str(p.relative_to(REPO)) for p in PROTOS),
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_committed_stubs_match_the_protos(tmp_path: Path) -> None:
    assert PROTOS, "no .proto files found"
    _generate(tmp_path)
    generated_dir = tmp_path / "antiphon" / "v1"
    generated = {p.name: p.read_bytes() for p in generated_dir.iterdir() if p.is_file()}
    # Every proto yields its message, typing and service stubs.
    for proto in PROTOS:
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            assert proto.stem + suffix in generated
    stale = [
        name
        for name, data in generated.items()
        if not (COMMITTED / name).is_file() or (COMMITTED / name).read_bytes() != data
    ]
    assert not stale, f"stubs differ from protos/ (run `make proto`): {stale}"


def test_no_stub_is_left_over_from_a_removed_proto() -> None:
    stems = {p.stem for p in PROTOS}
    for stub in COMMITTED.glob("*_pb2*.py*"):
        assert stub.name.split("_pb2")[0] in stems, f"{stub.name} has no .proto"
