"""bench.probes.tts_gpu keeps working where the tests run: on this CPU, the shipped
voice, two small levels, written as the GPU run writes it. (Its numbers mean
something on a GPU only: bench/results/tts-h200.json.)"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.probes.tts_gpu import CLAUSES, measure
from tests.support import tiers


@pytest.mark.models
def test_the_tts_bench_voices_every_level_and_piper_as_it_comes(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tiers.require(request, tiers.MODELS, "loads the Piper voice")
    from antiphon.stage1.backends.piper.assets import locate

    out = tmp_path / "tts.json"
    args = argparse.Namespace(
        device="cpu",
        voice=str(locate().voice_onnx),
        levels=[1, 3],
        max_batch=4,
        half=False,
        graphs=False,
        repeats=1,
        out=str(out),
    )
    measure(args)
    report = json.loads(out.read_text())
    assert report["as_it_comes"]["clauses_per_s"] > 0
    assert report["cuda_graphs"] is False
    # The graph in torch says what onnxruntime says.
    assert report["against_onnxruntime"]["max_abs_difference"] < 1e-3
    assert [level["clauses"] for level in report["levels"]] == [1, 3]
    for level in report["levels"]:
        assert 0 < level["wait_ms_p50"] <= level["wait_ms_p95"] <= level["wall_ms_p50"]
        assert level["x_real_time"] > 0
    # Three clauses called at once share batches: fewer batches than clauses.
    assert report["levels"][1]["batches_per_call"] < 3
    assert len(report["clause_phonemes"]) == len(json.loads(CLAUSES.read_text())["clauses"])
