"""bench.lib.profile: which processes of a service py-spy samples, and what the
samples of one say (`--profile-at` of bench.load and bench.gpu)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bench.lib.profile import profile_summary, profiled_services, python_processes

# A parent that starts a Python child and a non-Python one, as a stage
# supervisor starts its workers (and vLLM its engine core); the Python child
# spins in a function of its own name.
SPINNER = "def spin_here():\n    while True:\n        sum(range(1000))\nspin_here()\n"
PARENT = (
    "import subprocess, sys, time\n"
    f"subprocess.Popen([sys.executable, '-c', {SPINNER!r}])\n"
    "subprocess.Popen(['sleep', '60'])\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def service() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", PARENT])
    yield proc
    for child in psutil.Process(proc.pid).children(recursive=True):
        child.kill()
    proc.kill()
    proc.wait()


def _children(proc: subprocess.Popen[bytes], count: int) -> None:
    deadline = time.monotonic() + 10
    while len(psutil.Process(proc.pid).children()) < count:
        assert time.monotonic() < deadline, "the service's children never started"
        time.sleep(0.05)


def test_a_services_python_processes_are_its_own_and_its_python_childrens(
    service: subprocess.Popen[bytes],
) -> None:
    _children(service, 2)
    pids = python_processes(service.pid)
    assert len(pids) == 2 and pids[0] == service.pid  # the `sleep` child is not Python


def test_a_profiled_service_names_where_its_worker_spends_its_time(
    service: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    _children(service, 2)
    with profiled_services("py-spy", {"stage1": service.pid}, tmp_path / "level") as files:
        time.sleep(2)
    assert set(files) == {f"stage1 {pid}" for pid in python_processes(service.pid)}
    worker = next(path for label, path in files.items() if label != f"stage1 {service.pid}")
    summary = profile_summary(worker)
    assert "spin_here" in summary, summary
    assert worker.parent == tmp_path / "level" and worker.name.startswith("stage1-")
