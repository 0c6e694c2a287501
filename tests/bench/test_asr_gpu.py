"""bench.probes.asr_gpu keeps working where the tests run: on this CPU, a tiny
shape, both ways at each level, written as the GPU run writes it. (Its
numbers mean something on a GPU only: bench/results/asr-h200-*.json.)"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.probes.asr_gpu import measure


@pytest.mark.parametrize("graphs", [False, True])
def test_the_asr_bench_measures_both_ways_at_each_level(tmp_path: Path, graphs: bool) -> None:
    out = tmp_path / "asr.json"
    args = argparse.Namespace(
        device="cpu",
        shape="tiny-test",
        levels=[1, 2],
        seconds=1.0,
        tokens=3,
        repeats=1,
        graphs=graphs,
        out=str(out),
    )
    measure(args)
    report = json.loads(out.read_text())
    assert [level["batch"] for level in report["levels"]] == [1, 2]
    for level in report["levels"]:
        for way in ("speech", "window"):
            assert level[way]["batch_ms_p50"] > 0 and level[way]["utterances_per_s"] > 0
    # The audio plus 4 s of silence, against the 30 s window.
    assert report["encoder_frames"] == {"speech": 500, "window": 3000}
    assert report["cuda_graphs"] is graphs
