"""`make run` serves the profile the user names, as docs/duplex-models.md says.

`ANTIPHON_PROFILE=deploy/profiles/duplex.yaml ANTIPHON_DUPLEX_CHECKPOINT=...
make run` must bring up the Moshi-architecture backend (stage0 `moshi`, stage1
`mimi`), not the cascade, and say so: the startup output names the profile
and each stage's backend, and a client's `session.created` carries the
model's capabilities. Here with the tiny random checkpoint on the CPU, on free
ports; `install` and `models` are taken as done (`make -o`): the test
environment has them, and no LLM engine starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from stack import REPO, free_port

from tests.support import tiers
from tests.support.realtime import RealtimeClient, duplex_url

READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0


class MakeRun:
    def __init__(self, proc: subprocess.Popen[bytes], output: Path, port: int) -> None:
        self.proc = proc
        self.output = output
        self.port = port

    def text(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_for(self, line: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.text()
            if line in text:
                return text
            if self.proc.poll() is not None:
                pytest.fail(f"make run exited with {self.proc.returncode}:\n{text[-4000:]}")
            time.sleep(0.5)
        pytest.fail(f"make run did not print {line!r} within {timeout_s}s:\n{self.text()[-4000:]}")


@pytest.fixture
def make_run(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeRun]:
    tiers.require(request, tiers.STACK, "starts a local stack through make run")
    port = free_port()
    # The user's shell as the docs have it, and nothing of this test session's.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ANTIPHON_") and k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    }
    env["ANTIPHON_PROFILE"] = "deploy/profiles/duplex.yaml"
    env["ANTIPHON_DUPLEX_CHECKPOINT"] = "random:tiny"
    run_args = f"--port {port} --free-ports --run-dir {tmp_path / 'run'}"
    output = tmp_path / "make-run.out"
    with output.open("wb") as out:
        proc = subprocess.Popen(
            ["make", "-o", "install", "-o", "models", "run", f"RUN_ARGS={run_args}"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Its own process group: Ctrl-C's SIGINT reaches make and the stack as at a terminal.
            start_new_session=True,
        )
    try:
        yield MakeRun(proc, output, port)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.stack
@pytest.mark.models
async def test_make_run_on_the_duplex_profile_serves_the_moshi_backend_and_says_so(
    make_run: MakeRun,
) -> None:
    text = make_run.wait_for("Antiphon is ready", READY_TIMEOUT_S)
    assert "profile deploy/profiles/duplex.yaml (from ANTIPHON_PROFILE" in text, text
    assert "profile:   deploy/profiles/duplex.yaml" in text, text
    assert "stage0 moshi (model_native_duplex, 80 ms chunks)" in text, text
    assert "stage1 mimi" in text, text
    client = await RealtimeClient.connect(duplex_url(make_run.port))
    try:
        created = await client.open(type="realtime")
    finally:
        await client.close()
    assert created["type"] == "session.created", created
    caps = created["session"]["capabilities"]
    assert (caps["implementation_level"], caps["chunk_period_ms"]) == ("model_native_duplex", 80)
    assert caps["supports_barge_in"] is False
    # No LLM engine started: the cascade is not what serves.
    logs = "".join(
        p.read_text(errors="replace") for p in (make_run.output.parent / "run").glob("*.log")
    )
    assert "vllm" not in logs.lower() and "llama" not in logs.lower()


def test_make_run_runs_the_stack_entry_point_with_run_args() -> None:
    """What the test above starts is what `make run` runs: deploy/local/stack.py, with RUN_ARGS."""
    recipe = subprocess.run(
        ["make", "-n", "-o", "install", "-o", "models", "run", "RUN_ARGS=--free-ports"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")},
    ).stdout.strip()
    assert recipe.endswith("deploy/local/stack.py --free-ports"), recipe
