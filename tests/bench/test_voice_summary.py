"""bench.voice_summary: capacity at the SLO from the stack's runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.voice_summary import EMBEDDED, summarize


def _level(sessions: int, p95: float, *, completed: int | None = None, errors: int = 0,
           eagerness: str | None = None) -> dict[str, Any]:  # fmt: skip
    expected = sessions * 2
    level: dict[str, Any] = {
        "lane": "semantic_vad" if eagerness else "server_vad",
        "sessions": sessions,
        "end_of_speech_to_first_audio_ms": {"p50": p95 * 0.8, "p95": p95},
        "turns_completed": expected if completed is None else completed,
        "turns_expected": expected,
        "errors": {"count": errors},
        "processes": {"stage0": {"cpu_pct": 120.0}, "stage1": {"cpu_pct": 40.0}},
    }
    if eagerness:
        level["turn_detection"] = {"type": "semantic_vad", "eagerness": eagerness}
    return level


def _run(tmp_path: Path, name: str, model: str, levels: list[dict[str, Any]],
         sharing: str = "time-slicing", **env: str) -> Path:  # fmt: skip
    path = tmp_path / name
    env = {"ANTIPHON_LLM_MODEL": model, **env}
    path.write_text(json.dumps({"env": env, "machine": {"gpu_sharing": sharing}, "levels": levels}))
    return path


def test_capacity_is_the_largest_level_that_held_per_llm_and_detector(tmp_path: Path) -> None:
    same = "/tmp/dummy/same"
    runs = [
        _run(tmp_path, "a.json", same, [_level(128, 760), _level(256, 1040)]),
        # A second run of 256 held: runs differ, the larger that held counts.
        _run(tmp_path, "b.json", same, [_level(256, 910), _level(384, 950, completed=700)]),
        _run(tmp_path, "c.json", same, [_level(16, 540, eagerness="auto"),
                                        _level(64, 990, errors=1, eagerness="auto"),
                                        _level(128, 600, eagerness="high")]),
        _run(tmp_path, "d.json", "/tmp/dummy/qwen2.5-7b", [_level(128, 920), _level(256, 1199)]),
        # Smart Turn's engine named over the profile's is a detector of its own.
        _run(tmp_path, "e.json", same, [_level(64, 3114, eagerness="auto")],
             ANTIPHON_TURN_ENGINE="onnxruntime"),
        # The card shared through CUDA MPS is a layout of its own.
        _run(tmp_path, "f.json", same, [_level(64, 442, eagerness="high"),
                                        _level(128, 1496, eagerness="high")], sharing="mps"),
    ]  # fmt: skip
    summary = summarize(runs, 1000.0)
    assert summary["capacity_at_slo"] == {
        EMBEDDED: {
            "server_vad": 256,
            "semantic_vad/auto": 16,
            "semantic_vad/high": 128,
            "semantic_vad/auto/onnxruntime": 0,
            "semantic_vad/high+mps": 64,
        },
        "qwen2.5-7b": {"server_vad": 128},
    }
    rows = summary["levels"]
    assert len(rows) == 12
    missing_turns = next(r for r in rows if r["sessions"] == 384)
    assert missing_turns["held"] is False and missing_turns["file"] == "b.json"
    assert rows[0]["cpu_pct"] == {"stage0": 120.0, "stage1": 40.0}
