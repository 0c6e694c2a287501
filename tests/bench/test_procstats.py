"""The load bench's CPU accounting, on a real process tree."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from antiphon.client.load.report import busiest_line
from bench.lib.procstats import ProcSampler

# A parent (a shell) with two children: one spins a core, one sleeps.
TREE = f"{sys.executable} -c 'while True: pass' & sleep 30 & wait"


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["bash", "-c", TREE], start_new_session=True)
    try:
        yield proc
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        proc.wait(5)


def test_the_busiest_process_of_a_tree_is_the_one_that_spins(
    tree: subprocess.Popen[bytes],
) -> None:
    time.sleep(0.3)  # the children exist
    sampler = ProcSampler({"stage0": tree.pid}, interval_s=0.1).start()
    try:
        window = sampler.mark()
        time.sleep(1.5)
        usage = sampler.usage(window)
    finally:
        sampler.stop()
    busiest = usage["stage0"]["busiest"]
    spinner, *rest = busiest
    assert spinner["name"].startswith("python"), busiest
    # The spinner holds a core (shared with the test itself on two cores).
    assert spinner["cpu_pct"] > 40, busiest
    assert all(p["cpu_pct"] < 10 for p in rest), busiest
    # The tree's sum is the spinner's and the idle ones' together.
    assert usage["stage0"]["cpu_pct"] == pytest.approx(sum(p["cpu_pct"] for p in busiest), abs=2)
    line = busiest_line({"processes": usage})
    assert line.startswith(f"stage0 {spinner['name']} "), line
