"""`python -m bench.duplex_fanin` end to end on this CPU: the real stage0 worker with two
front ends (its step a sleep) and a stage1 `mimi` worker with two (its decode a sleep),
one level of two paced sessions; the JSON and the table hold what docs/performance.md
reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.runs import run_bench

SMOKE = ["--front-ends", "2", "--levels", "2", "--window-s", "2", "--warmup-s", "1", "--stage1"]
SMOKE += ["--stage1-front-ends", "2"]

pytestmark = pytest.mark.stack


def test_two_front_ends_serve_paced_sessions_and_the_level_is_reported(tmp_path: Path) -> None:
    out = tmp_path / "fanin.json"
    stdout = run_bench("bench.duplex_fanin", *SMOKE, "--out", str(out), timeout=180)
    data = json.loads(out.read_text())
    assert data["step"] == "a sleep of 40.0 ms"
    [level] = data["levels"]
    assert (level["front_ends"], level["stage1_front_ends"], level["sessions"]) == (2, 2, 2)
    assert level["errors"] == {} and level["sessions_streaming"] == 2
    # Both front ends' sessions got frames at the frame rate, and audio back.
    assert level["frames"] >= 0.5 * level["frames_expected"] > 0
    assert 40 < level["frame_gap_ms"]["p50"] < 200
    assert 40 < level["audio_gap_ms"]["p50"] < 200
    # The stepper's step histogram: the sleep, within its 5 ms buckets.
    assert 35 <= level["step_ms"]["p50"] <= 80
    assert level["messages_per_s"] > 0
    assert "| 2 | 2 | 2 |" in stdout and data["max_held"].keys() == {"2+2"}
