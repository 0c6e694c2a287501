"""bench.webrtc keeps working: one call and one socket against a synthetic
stack, both answered, each with its latency and the gateway's CPU (its
numbers: `make bench`, bench/results/webrtc.json)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.webrtc import measure

pytestmark = [pytest.mark.stack, pytest.mark.models]


async def test_the_webrtc_bench_measures_a_call_against_a_socket(tmp_path: Path) -> None:
    out = tmp_path / "webrtc.json"
    await measure(argparse.Namespace(calls=[1], timeout=60.0, out=str(out)))
    levels = json.loads(out.read_text())["levels"]
    assert [(lv["transport"], lv["sessions"]) for lv in levels] == [
        ("webrtc", 1),
        ("websocket", 1),
    ]
    for level in levels:
        assert level["answered"] == 1 and not level["errors"], level
        latency = level["end_of_speech_to_first_audio_ms"]
        # After the server VAD's 500 ms of silence, and well within the timeout.
        assert 300 < latency["p50"] < 10_000, level
        assert level["gateway_cpu_pct"] > 0, level
