"""The load generator (`antiphon.client.load`) against the serving path (synthetic
stages, the real gateway, session service and Redis): the runner measures
every turn of every session, `antiphon bench` writes the JSON and the PNG, the
live lanes time the server's own endpointing, and a barge-in trial times
the cut."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from stack import LocalStack

from antiphon.client import audio
from antiphon.client.load import (
    SERVER_VAD,
    LoadOptions,
    LoadSession,
    barge_in_trial,
    lane_session,
    live_question,
    manual_question,
    run_level,
    trim_leading_silence,
)
from tests.support.speech import spoken

pytestmark = pytest.mark.stack
QUESTION = "What is the capital of France?"


def url(port: int) -> str:
    return f"ws://127.0.0.1:{port}/v1/realtime?duplex=1"


async def test_the_runner_times_every_turn_of_every_session(synthetic_stack: LocalStack) -> None:
    question = manual_question(QUESTION, spoken(QUESTION, voice="espeak"))
    level = await run_level(
        url(synthetic_stack.ports.gateway),
        2,
        lambda session, turn: question,
        LoadOptions(turns=2, label=None),
    )
    assert (level["opened"], level["turns_completed"], level["turns_expected"]) == (2, 4, 4)
    assert level["errors"] == {"count": 0, "codes": {}}
    for key in (
        "commit_to_first_audio_ms",
        "commit_to_done_ms",
        "end_of_speech_to_first_audio_ms",
        "end_of_speech_to_done_ms",
        "heartbeat_rtt_ms",
    ):
        assert level[key]["n"] == 4, key
    # The end of speech is sent before the commit: it is the further of the two.
    c2a, e2a = level["commit_to_first_audio_ms"], level["end_of_speech_to_first_audio_ms"]
    assert 0 < c2a["p50"] <= e2a["p50"] < 10_000
    assert level["transcripts"] == {"heard": 4, "empty": 0, "missing": 0}
    assert {(t["session"], t["turn"]) for t in level["turns"]} == {
        (s, t) for s in range(2) for t in range(2)
    }
    assert all(t["audio_deltas"] >= 1 and t["answer"] for t in level["turns"])
    # Against a server it did not start, the run measures its own process.
    assert set(level["processes"]) == {"loadgen"}


async def test_the_first_turns_start_spread_over_the_time_asked(
    synthetic_stack: LocalStack,
) -> None:
    """By default over one utterance (a burst); `start_spread_s` spreads them
    over a turn's period instead: the second of two sessions starts half of it
    later."""
    question = manual_question(QUESTION, spoken(QUESTION, voice="espeak"))
    level = await run_level(
        url(synthetic_stack.ports.gateway),
        2,
        lambda session, turn: question,
        LoadOptions(turns=1, label=None, start_spread_s=12.0),
    )
    assert level["turns_completed"] == 2, level["errors"]
    assert level["start_spread_s"] == 12.0
    # The second session's turn could not start before 6 s (over one utterance,
    # both turns would be done in about four).
    assert level["turns_wall_s"] >= 6.0
    default = await run_level(
        url(synthetic_stack.ports.gateway),
        1,
        lambda session, turn: question,
        LoadOptions(turns=1, label=None),
    )
    assert default["start_spread_s"] == pytest.approx(question.chunks * 0.2)


def test_antiphon_bench_writes_the_json_and_the_png(
    synthetic_stack: LocalStack, tmp_path: Path
) -> None:
    wav = tmp_path / "q.wav"
    audio.write_wav(wav, spoken(QUESTION, voice="espeak"))
    argv = ["--url", f"ws://127.0.0.1:{synthetic_stack.ports.gateway}/v1/realtime"]
    argv += ["--sessions", "1,2", "--turns", "2", "--in", str(wav)]
    argv += ["--out-dir", str(tmp_path), "--no-progress", "--slo-ms", "10000"]
    # The installed command, as a user runs it.
    run = subprocess.run(
        [str(Path(sys.executable).with_name("antiphon")), "bench", *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "sessions" in run.stdout  # the summary table
    report = json.loads((tmp_path / "load-manual.json").read_text())
    assert (tmp_path / "load-manual.png").stat().st_size > 0
    # `?duplex=1` was added: the sessions heartbeat and close in the duplex dialect.
    assert report["url"].endswith("?duplex=1")
    assert [lv["sessions"] for lv in report["levels"]] == [1, 2]
    assert [lv["turns_completed"] for lv in report["levels"]] == [2, 4]
    assert report["levels"][1]["samples"]["commit_to_first_audio_ms"]
    assert report["capacity"] == {"slo_ms": 10000.0, "sessions": 2}


@pytest.mark.parametrize("silence_ms", [None, 200])
async def test_the_server_vad_lane_times_the_servers_endpointing(
    synthetic_stack: LocalStack, silence_ms: int | None
) -> None:
    question = live_question(QUESTION, spoken(QUESTION, voice="espeak"))
    level = await run_level(
        url(synthetic_stack.ports.gateway),
        1,
        lambda session, turn: question,
        LoadOptions(lane="server_vad", turns=2, label=None, silence_ms=silence_ms),
    )
    assert level["turns_completed"] == 2, level["errors"]
    assert level["commit_to_first_audio_ms"] is None  # no commit in this lane
    assert level["end_of_speech_to_first_audio_ms"]["n"] == 2
    # The server heard the end of speech, committed the turn and answered it.
    for key in ("speech_stopped", "committed", "created"):
        assert level["end_of_speech_to"][key]["n"] == 2, key
    assert level["turn_detection"]["type"] == "server_vad"
    assert level["transcripts"]["heard"] == 2
    # The session's wait after speech, and the turn ends that much after it.
    silence = level["turn_detection"]["silence_duration_ms"]
    assert silence == (silence_ms or 500)
    assert silence < level["end_of_speech_to"]["speech_stopped"]["p50"] < silence + 300


def test_only_server_vad_takes_a_silence_setting_and_only_semantic_vad_an_eagerness() -> None:
    assert lane_session("server_vad") is SERVER_VAD
    with pytest.raises(ValueError, match="server_vad"):
        lane_session("semantic_vad", 200)
    with pytest.raises(ValueError, match="semantic_vad"):
        lane_session("server_vad", eagerness="high")
    eager = lane_session("semantic_vad", eagerness="high")
    assert eager["audio"]["input"]["turn_detection"] == {
        "type": "semantic_vad",
        "eagerness": "high",
    }
    assert "eagerness" not in lane_session("semantic_vad")["audio"]["input"]["turn_detection"]


async def test_a_barge_in_trial_cancels_the_answer_and_times_it(
    slow_synthetic_stack: LocalStack,
) -> None:
    ask = spoken("Tell me a long story about a brave knight.", voice="espeak")
    barge = trim_leading_silence(spoken("Wait, stop.", voice="espeak"))
    session = await LoadSession.open(0, url(slow_synthetic_stack.ports.gateway), SERVER_VAD, 30)
    try:
        trial = await barge_in_trial(session, ask, barge, 30)
    finally:
        await session.close()
    assert trial["status"] == "cancelled", trial
    assert 0 < trial["onset_to_done_ms"] < 10_000
    assert trial["audio_deltas"] >= 1
