"""bench.probes.turn_gpu keeps working where the tests run: on this CPU, the shipped
Smart Turn, two small levels, written as the GPU run writes it. (Its numbers
mean something on a GPU only.)"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.lib.questions import RECORDED_QUESTIONS
from bench.probes.turn_gpu import CUTS, measure


@pytest.mark.models
def test_the_turn_bench_answers_every_level_and_compares_with_onnxruntime(
    tmp_path: Path,
) -> None:
    out = tmp_path / "turn.json"
    args = argparse.Namespace(device="cpu", levels=[1, 3], repeats=1, cpu_windows=4, out=str(out))
    measure(args)
    report = json.loads(out.read_text())
    assert report["as_it_comes"]["windows"] == 4
    assert report["as_it_comes"]["windows_per_s"] > 0
    agrees = report["against_onnxruntime"]
    assert agrees["windows"] == len(RECORDED_QUESTIONS) * len(CUTS)
    # The fixtures span both answers: whole questions high, some cut ones low.
    assert max(agrees["onnxruntime"]) > 0.9 and min(agrees["onnxruntime"]) < 0.1
    # torch's int8 graph is as close to onnxruntime as onnxruntime's two ways are.
    spread = agrees["onnxruntime_node_by_node"]["max_logit_difference"]
    assert 0 < agrees["max_logit_difference"] <= max(1.0, spread)
    assert [level["windows"] for level in report["levels"]] == [1, 3]
    for level in report["levels"]:
        assert level["wall_ms_p50"] > 0 and level["windows_per_s"] > 0
        assert level["over_as_it_comes"] > 0
