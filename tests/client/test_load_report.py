"""A load run's summary: the result JSON's measures from the turns, the audio
gaps and the lanes, the capacity under an SLO, the table and the plot of a run
that measured only itself, `bench_main`'s answer when nothing opens, and the
bench scripts that run on the package."""

from __future__ import annotations

import importlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from antiphon.client import audio
from antiphon.client.load import (
    LANES,
    TurnResult,
    audio_joins,
    bench_main,
    capacity,
    plot,
    print_table,
)
from antiphon.client.load.report import (
    busiest_line,
    new_report,
    print_summary,
    summarize_level,
)

OWN = {
    "loadgen": {"cpu_s": 1, "cpu_pct": 10, "cpu_pct_peak": 20, "rss_mib": 50, "peak_rss_mib": 60}
}


def turn(i: int, status: str = "completed", transcript: str | None = "hi") -> TurnResult:
    return TurnResult(
        session=i,
        turn=0,
        status=status,
        first_audio_ms=100.0 + i,
        done_ms=300.0,
        eos_first_audio_ms=200.0 + i,
        eos_done_ms=400.0,
        transcript=transcript,
        responses=1,
        audio_gap_max_ms=5.0,
        audio_deltas=3,
        event_gaps_ms=[1.0, 2.0],
        heartbeat_ms=3.0,
    )


def level(results: list[TurnResult], **counts: Counter[str]) -> dict[str, Any]:
    return summarize_level(
        n=len(results),
        turns=1,
        opened=len(results),
        refused=counts.get("refused", Counter()),
        aborted=counts.get("aborted", Counter()),
        errors=counts.get("errors", Counter()),
        open_ms=[5.0] * len(results),
        results=results,
        turns_wall_s=1.0,
        lag_ms=[0.1],
        usage=OWN,
        overhead=True,
    )


def test_a_level_reports_each_measure_and_every_way_a_turn_went_wrong() -> None:
    lv = level(
        [turn(0), turn(1), turn(2, "timeout"), turn(3, transcript="")],
        errors=Counter({"invalid_value": 1}),
    )
    assert lv["turns_completed"] == 3 and lv["turns_expected"] == 4
    assert lv["commit_to_first_audio_ms"]["n"] == 4
    assert lv["end_of_speech_to_first_audio_ms"]["p50"] == 201.5
    assert lv["errors"] == {
        "count": 3,
        "codes": {"invalid_value": 1, "response_timeout": 1, "empty_transcript": 1},
    }
    assert lv["transcripts"] == {"heard": 3, "empty": 1, "missing": 0}
    assert lv["overhead"]["event_gap_ms"] == {"p50": 1.5, "p99": 2.0}
    # The per-turn records leave the event gaps to the level's statistics.
    assert "event_gaps_ms" not in lv["turns"][0]


def test_first_audio_is_also_reported_by_the_sessions_turn(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The first turns of a level come as a burst: they are told apart from the later ones."""
    results = [turn(i) for i in range(4)]
    for r in results[2:]:
        r.turn = 1
        r.eos_first_audio_ms = 1000.0 + 200.0 + r.session
    results.append(turn(9, "timeout"))
    results[-1].eos_first_audio_ms = None
    lv = level(results)
    assert lv["end_of_speech_to_first_audio_ms_by_turn"] == {
        "0": {"p50": 200.5, "p95": 200.95, "max": 201.0, "n": 2},
        "1": {"p50": 1202.5, "p95": 1202.95, "max": 1203.0, "n": 2},
    }
    report = new_report("server_vad", {}, [], 2, backend="remote")
    report["levels"] = [lv]
    print_summary(report)
    by_turn = capsys.readouterr().out.splitlines()[2]
    assert by_turn == "eos -> first audio p50/p95 by turn x5: turn 0 200/201, turn 1 1202/1203"


def test_the_first_join_is_the_silence_heard_before_the_second_audio_delta() -> None:
    assert audio_joins([40.004, 180.0, 0.0]) == (180.0, 40.0)
    assert audio_joins([]) == (None, None)  # a one-chunk answer has no join
    joins = [turn(0), turn(1), turn(2)]
    for i, r in enumerate(joins):
        r.audio_first_join_silence_ms = [10.0, 30.0, None][i]
    lv = level(joins)
    assert lv["audio_first_join_silence_ms"] == {
        "p50": 20.0,
        "p95": 29.0,
        "p99": 29.8,
        "max": 30.0,
        "n": 2,
    }
    assert lv["samples"]["audio_first_join_silence_ms"] == [10.0, 30.0]
    assert [t["audio_first_join_silence_ms"] for t in lv["turns"]] == [10.0, 30.0, None]


def test_the_semantic_vad_lane_is_a_live_lane_with_the_servers_semantic_end_of_turn(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert LANES["semantic_vad"]["audio"]["input"]["turn_detection"] == {"type": "semantic_vad"}
    lv = level([turn(0)]) | {"lane": "semantic_vad"}
    print_table("remote", [lv], header=True)
    header, line = capsys.readouterr().out.splitlines()
    assert "silence 1st/max p95" in header
    assert line.split()[:3] == ["remote", "semantic_vad", "1"]


def test_capacity_is_the_largest_level_served_within_the_slo() -> None:
    ok = level([turn(0), turn(1)])
    bad = level([turn(0), turn(1), turn(2, "failed")])
    slow = level([turn(i) for i in range(4)])
    slow["commit_to_first_audio_ms"] = {"p95": 5000.0}
    assert capacity([ok, bad, slow], slo_ms=1000) == {"slo_ms": 1000, "sessions": 2}


def test_a_run_that_measured_only_itself_prints_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lv = level([turn(0), turn(1)])
    print_table("remote", [lv], header=True)
    header, line = capsys.readouterr().out.splitlines()
    assert header.endswith("loadgen") and line.split()[-1] == "10/20%,60"
    report = new_report("manual", {}, [], 1, backend="remote")
    report["levels"] = [lv]
    plot(report, tmp_path / "load.png")
    assert (tmp_path / "load.png").stat().st_size > 0


def test_session_replicas_each_get_a_column_after_the_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lv = level([turn(0)])
    usage = {"cpu_pct": 50.0, "cpu_pct_peak": 90.0, "peak_rss_mib": 150.0}
    lv["processes"] |= {
        name: {**usage, "busiest": [{"pid": 1, "name": "python3", "cpu_pct": 50.0 + k}]}
        for k, name in enumerate(["session_1", "session", "gateway", "session_b"])
    }
    print_table("cascade", [lv], header=True)
    header = capsys.readouterr().out.splitlines()[0]
    # Replicas in order after their service; a name that is not a replica's is no column.
    assert header.endswith("gateway session session_1 loadgen")
    assert busiest_line(lv) == "gateway python3 52%, session python3 51%, session_1 python3 50%"


def test_bench_main_says_so_when_the_server_is_unreachable(tmp_path: Path) -> None:
    wav = tmp_path / "q.wav"
    audio.write_wav(wav, audio.silence(400))
    argv = ["--url", "ws://127.0.0.1:9/v1/realtime", "--in", str(wav), "--no-progress"]
    assert bench_main([*argv, "--out-dir", str(tmp_path), "--timeout", "5"]) == 2
    [lv] = json.loads((tmp_path / "load-manual.json").read_text())["levels"]
    assert lv["opened"] == 0
    assert next(iter(lv["refused"])).startswith("connect_")


@pytest.mark.parametrize("script", ["bench.load", "bench.soak", "bench.faults.__main__"])
def test_the_bench_scripts_import_the_load_generator_they_run(script: str) -> None:
    assert callable(importlib.import_module(script).main)
