"""bench.gpu.levels and bench.gpu.raw: a level's summary, the capacity it implies,
and the worker's TTFT over raw vLLM's."""

from __future__ import annotations

import argparse
from typing import Any

from bench.gpu.levels import capacity_at_slo, summarize, turns_at_level
from bench.gpu.raw import ratio


def level(sessions: int, p95: float | None, completed: int, expected: int) -> dict[str, Any]:
    return {
        "sessions": sessions,
        "ttft_ms": {"p50": p95, "p95": p95},
        "completed": completed,
        "expected": expected,
    }


def test_capacity_is_the_largest_level_within_the_slo_with_every_turn_done() -> None:
    levels = [
        level(1, 30.0, 3, 3),
        level(64, 140.0, 192, 192),
        # Within the SLO, but a turn did not complete: not a capacity.
        level(128, 120.0, 383, 384),
        level(256, 400.0, 512, 512),
    ]
    assert capacity_at_slo(levels) == 64
    assert capacity_at_slo([level(1, 151.0, 3, 3)]) is None


def test_turns_at_a_level_take_the_last_threshold_it_reaches() -> None:
    args = argparse.Namespace(turns=3, turns_at=["512:1", "256:2"])
    assert [turns_at_level(args, n) for n in (128, 256, 511, 512)] == [3, 2, 2, 1]


def test_summary_counts_completed_turns_and_errors_by_phase() -> None:
    done = {"completed": True, "turn": 0, "tokens": 10, "asr_ms": 100.0, "transcript": "hi"}
    records = [
        done | {"session": 0, "ttft_ms": 20.0, "stage_ttft_ms": 15.0},
        done | {"session": 1, "ttft_ms": 40.0, "stage_ttft_ms": 30.0},
        {"session": 2, "turn": 0, "completed": False, "error": "asr: TimeoutError()"},
    ]
    s = summarize(3, 1, records)
    assert (s["completed"], s["expected"]) == (2, 3)
    assert s["ttft_ms"]["p50"] == 30.0
    assert s["ttft_over_engine_ms"]["p50"] == 7.5
    assert s["errors"] == {"asr": 1}
    assert s["ttft_ms_by_turn"] == {"0": {"p50": 30.0, "p95": 39.0}}


def test_ratio_pairs_levels_of_the_same_size_only() -> None:
    worker = [level(1, 30.0, 3, 3), level(64, 150.0, 192, 192)]
    raw = [level(64, 100.0, 192, 192)]
    assert ratio(worker, raw) == [
        {"sessions": 64, "ttft_p50_worker_over_raw": 1.5, "ttft_p95_worker_over_raw": 1.5}
    ]
