"""bench.probes.minicpmo_voice keeps working where the tests run: the tiny
random voice on this CPU, two levels, written as the GPU run writes it (its
numbers mean something on a GPU only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.probes.minicpmo_voice import main


@pytest.mark.models
def test_the_voice_probe_speaks_every_sessions_units_in_batches(tmp_path: Path) -> None:
    out = tmp_path / "voice.json"
    options = ["--checkpoint", "random:tiny", "--device", "cpu", "--levels", "1,3"]
    main([*options, "--units", "2", "--together-s", "1", "--out", str(out)])
    report = json.loads(out.read_text())
    assert [level["sessions"] for level in report["levels"]] == [1, 3]
    for level in report["levels"]:
        sessions = level["sessions"]
        first, *mid, last = level["batches"]
        # A turn's first unit keeps back the cross-fade (840 ms), a mid-turn
        # unit is a second of 25 codes, the last flushes what was held.
        assert first["audio_s"] == pytest.approx(0.84 * sessions, abs=0.01)
        assert [b["codes"] for b in mid] == [25 * sessions] * 2
        assert [b["audio_s"] for b in mid] == [pytest.approx(1.0 * sessions)] * 2
        assert last["audio_s"] >= 0.28 * sessions
        assert 0 < level["mid_turn"]["batch_s_p50"] <= level["mid_turn"]["batch_s_max"]
    together = report["together"]
    assert together["errors"] == {}
    assert together["batches"]["talker"] >= 1 and together["batches"]["token2wav"] >= 1
