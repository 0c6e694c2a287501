"""bench.lib's small owners: percentiles, the duplex URL, atomic results files, the
stack's worker counts, how the machine's GPU is shared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from antiphon.common.config import PROFILE_ENV, load
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.stage1.settings import Stage1Settings
from bench.lib.loadstack import await_workers, silent, worker_env
from bench.lib.machine import device_name, free_port, gpu_sharing
from bench.lib.realtime import duplex_url
from bench.lib.results import write_json
from bench.lib.stats import pct
from deploy.local.stack import Ports
from tests.bench.serving import Serve, served


def test_pct_interpolates_rounds_and_is_none_for_no_values() -> None:
    assert pct([10.0, 20.0], 50) == 15.0
    assert pct([0.0, 10.0], 12.34, digits=1) == 1.2
    assert pct([], 50) is None


def test_duplex_url_keeps_a_further_query_and_opts_in_once() -> None:
    assert duplex_url(8080) == "ws://127.0.0.1:8080/v1/realtime?duplex=1"
    assert duplex_url(8080, "?autostart=0&duplex=0") == (
        "ws://127.0.0.1:8080/v1/realtime?autostart=0&duplex=1"
    )


def test_write_json_replaces_the_file_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    out = tmp_path / "deeper" / "level.json"
    write_json(out, {"levels": [1]})
    write_json(out, {"levels": [1, 2]})
    assert json.loads(out.read_text()) == {"levels": [1, 2]}
    assert [p.name for p in out.parent.iterdir()] == ["level.json"]


def test_the_bench_s_worker_counts_override_the_profile_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gpu.yaml runs four of each; a bench run of eight must start eight, or the
    session is handed four addresses with no worker behind them."""
    profile = Path(__file__).resolve().parents[2] / "deploy" / "profiles" / "gpu.yaml"
    monkeypatch.setenv(PROFILE_ENV, str(profile))
    assert (load(Stage0Settings).llm_front_ends, load(Stage1Settings).worker_processes) == (4, 4)
    env = worker_env(Ports(stage0=50061, stage1=50071), front_ends=8, voices=8)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert (load(Stage0Settings).llm_front_ends, load(Stage1Settings).worker_processes) == (8, 8)
    assert json.loads(env["ANTIPHON_STAGE0_ADDRESSES"])[-1] == "127.0.0.1:50068"
    assert json.loads(env["ANTIPHON_STAGE1_ADDRESSES"])[0] == "127.0.0.1:50071"
    assert "ANTIPHON_STAGE0_ADDRESSES" not in worker_env(Ports(), front_ends=1, voices=1)


def test_a_worker_that_does_not_answer_fails_the_stack_loudly(serve: Serve) -> None:
    _worker, (answering_port,) = served(serve, Stage0Metrics, 1)
    nobody = free_port()
    assert silent([answering_port, nobody]) == [nobody]
    await_workers([answering_port], timeout_s=0)
    with pytest.raises(RuntimeError, match=str(nobody)):
        await_workers([answering_port, nobody], timeout_s=0)


def test_a_run_records_whether_its_processes_shared_the_gpu_through_mps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GPU: nothing to share. With one, `voice_gpu.sh --mps`'s exported pipe
    says the stack's processes were the MPS daemon's clients."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    assert gpu_sharing() is None
    # What nvidia-smi answers on the lent machine (this one has no GPU).
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200'\n")
    smi.chmod(0o755)
    assert gpu_sharing() == "time-slicing"
    assert device_name() == "NVIDIA H200 (1 GPU)"
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "mps-pipe"))
    assert gpu_sharing() == "mps"
