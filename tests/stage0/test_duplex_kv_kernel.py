"""The GPU's read of the float8 KV window (kv_kernel.py): the same numbers as
the chunk loop, checked by tests/stage0/kv_kernel_check.py, under Triton's
interpreter here and on the GPU where one is (the GPU bench runs it there:
bench/recipes/GPU.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.stage0 import kv_kernel_check

pytestmark = pytest.mark.models


def test_the_kernels_read_the_window_as_the_chunk_loop_does_in_tritons_interpreter() -> None:
    # The interpreter is chosen when the kernels are defined, so in a process
    # of its own: the other tests' imports have defined them for a GPU.
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "tests.stage0.kv_kernel_check", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "13 windows on cpu" in run.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_kernels_read_the_window_as_the_chunk_loop_does_on_the_gpu() -> None:
    kv_kernel_check.main("cuda")


def test_runs_per_query_fill_the_gpu_and_none_is_shorter_than_a_block() -> None:
    from antiphon.stage0.backends.moshi.kv_kernel import BLOCK_N, split_count

    assert split_count(programs=128 * 32, positions=3000) == 1  # rows x heads fill it
    assert split_count(programs=32, positions=3000) == 16  # one row: as many as allowed
    assert split_count(programs=32, positions=3 * BLOCK_N) == 3  # no run under a block
    assert split_count(programs=256, positions=3000) == 8
