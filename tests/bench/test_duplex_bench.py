"""`python -m bench.duplex` end to end on this CPU: the tiny random Moshi-architecture model
through a real stage0 `moshi` worker and stage1 `mimi` worker, two levels, and the
reference loop, in well under a minute; the JSON holds what the GPU run reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.runs import run_bench

SMOKE = ["--checkpoint", "random:tiny", "--device", "cpu", "--levels", "1,2", "--window-s", "3"]
# stage1 as a stepper and two front ends (duplex_front_ends): its step histogram
# is the stepper's, and each session's audio comes from its front end.
SMOKE += ["--stage1-front-ends", "2"]

pytestmark = pytest.mark.stack


def test_the_smoke_run_writes_every_level_the_reference_and_the_ratio(tmp_path: Path) -> None:
    out = tmp_path / "duplex.json"
    stdout = run_bench("bench.duplex", *SMOKE, "--out", str(out), timeout=120)
    data = json.loads(out.read_text())

    assert data["checkpoint"] == "random:tiny"
    assert data["torch_device"] == "cpu"
    assert data["settings"]["capacity"] == 2
    assert data["settings"]["window_s"] == 3.0
    assert data["worker_profile"]["stage1"]["duplex_front_ends"] == 2
    assert data["device"].startswith("CPU")
    assert data["settings_unknown_to_workers"] == {}
    assert data["stage0_info"]["model_native"] is True
    assert data["stage0_info"]["input_sample_rate_hz"] == 24000
    assert data["skipped_levels"] == []

    assert [lv["sessions"] for lv in data["levels"]] == [1, 2]
    for lv in data["levels"]:
        n = lv["sessions"]
        assert lv["errors"] == {}, lv["error_sample"]
        step = lv["worker_step_ms"]
        # Some 37 steps in a 3 s window; each interpolated within the histogram's buckets.
        assert step["count"] >= 20
        assert 0 < step["p50"] <= step["p99"] <= 1000
        assert lv["stage1_step_ms"]["count"] > 0
        assert lv["sessions_streaming"] == n
        # Every frame comes back as audio: most of the window's chunks arrived.
        assert lv["audio_chunks"] >= 0.5 * lv["audio_chunks_expected"] > 0
        assert 40 < lv["audio_gap_ms"]["p50"] < 200
        assert lv["audio_gap_ms"]["p50"] <= lv["audio_gap_ms"]["p99"]
        for key in ("late_frames", "silence_frames", "dropped_input_ms"):
            assert lv[key] >= 0
        assert lv["cpu_pct"]["stage0"] > 0
        assert isinstance(lv["real_time"], bool)
        assert set(lv["gpu_memory_mib"]) == {"stage0", "stage1", "device_peak"}

    ref = data["reference"]
    assert [r["sessions"] for r in ref["levels"]] == [1, 2]
    for r in ref["levels"]:
        assert 0 < r["all_p50_ms"] <= r["all_p99_ms"]
        assert r["enc_lm_p99_ms"] > 0
    assert ref["context_frames"] == 16  # random:tiny's own
    assert [r["sessions"] for r in data["ratio"]] == [1, 2]
    assert all(r["worker_p99_over_reference_p99"] > 0 for r in data["ratio"])

    assert "| sessions | step p50 / p99 ms |" in stdout
    table = run_bench("bench.duplex", "--table", str(out), timeout=60)
    assert table.count("\n| ") == 4  # the header, its rule and two levels


def test_nemotron_s_smoke_run_streams_every_session_through_its_workers_and_nemo_s_loop(
    tmp_path: Path,
) -> None:
    """`--model nemotron`: stage0 and stage1 `nemotron` workers (NeMo's code,
    the tiny random model), the LLM's tokens forwarded to stage1 as audio, and
    NeMo's own streaming inference as the reference."""
    out = tmp_path / "duplex-nemotron.json"
    argv = ["--model", "nemotron", "--checkpoint", "random:tiny", "--device", "cpu"]
    argv += ["--levels", "2", "--window-s", "2", "--out", str(out)]
    run_bench("bench.duplex", *argv, timeout=180)
    data = json.loads(out.read_text())

    assert data["model"] == "nemotron"
    assert data["settings_unknown_to_workers"] == {}
    assert (
        data["worker_profile"]["stage0"]["backend"],
        data["worker_profile"]["stage1"]["backend"],
    ) == ("nemotron", "nemotron")
    assert data["stage0_info"] == {
        "backend": "nemotron",
        "capacity": 2,
        "model_native": True,
        "input_sample_rate_hz": 16000,
    }
    [level] = data["levels"]
    assert level["errors"] == {}, level["error_sample"]
    assert level["worker_step_ms"]["count"] >= 12
    assert level["stage1_step_ms"]["count"] > 0
    # Every frame's tokens come back as audio.
    assert level["sessions_streaming"] == 2
    assert level["audio_chunks"] >= 0.5 * level["audio_chunks_expected"] > 0
    [ref] = data["reference"]["levels"]
    assert ref["sessions"] == 2 and 0 < ref["lm_p50_ms"] <= ref["lm_p99_ms"]
    assert ref["all_p99_ms"] >= ref["lm_p99_ms"]
    assert data["ratio"][0]["worker_p99_over_reference_p99"] > 0


def test_minicpmo_s_smoke_run_answers_and_voices_every_unit_of_every_session_framed_or_not(
    tmp_path: Path,
) -> None:
    """`--model minicpmo`: the stage0 `minicpmo` worker (the thinker) and the stage1
    `minicpmo` worker (its voice: talker and token2wav), no reference loop;
    sessions of 200 ms appends, each unit's ModelFrame timed from the append that
    closed it, and forwarded to stage1 as the session service does, its audio
    timed from the frame; `--frames-at` runs a level again with a camera frame on
    every unit, right after the plain one. The tiny random thinker speaks every
    unit (it may end a turn and open another)."""
    out = tmp_path / "minicpmo.json"
    argv = ["--model", "minicpmo", "--checkpoint", "random:tiny", "--device", "cpu"]
    # The tiny thinker's positions stop at 4,096: a context below the backend's default.
    argv += ["--context", "2048", "--levels", "1,2", "--frames-at", "2", "--window-s", "3"]
    stdout = run_bench("bench.duplex", *argv, "--out", str(out), timeout=240)
    data = json.loads(out.read_text())

    assert data["model"] == "minicpmo" and data["unit_ms"] == 1000 and data["voice"] is True
    assert "reference" not in data and "ratio" not in data
    stage0, stage1 = data["worker_profile"]["stage0"], data["worker_profile"]["stage1"]
    assert stage1["backend"] == "minicpmo" and stage1["duplex_checkpoint"] == "random:tiny"
    assert (stage1["duplex_batch"], stage1["capacity"]) == (2, 2)
    assert stage0["llm_gpu_memory_utilization"] == 0.55  # vLLM's share beside the voice
    assert data["settings_unknown_to_workers"] == {}
    assert data["stage0_info"]["input_sample_rate_hz"] == 16000
    assert data["stage0_info"]["chunk_period_ms"] == 1000
    assert data["stage1_info"] == {"backend": "minicpmo", "capacity": 2, "model_native": True}
    assert [(lv["sessions"], lv["frames"]) for lv in data["levels"]] == [
        (1, False),
        (2, False),
        (2, True),
    ]
    for lv in data["levels"]:
        assert lv["errors"] == {}, lv["error_sample"]
        # Three seconds of window: three units a session, each answered and timed.
        assert lv["units_closed"] == 3 * lv["sessions"]
        assert lv["units_answered"] == lv["units_closed"]
        lat = lv["unit_latency_ms"]
        assert 0 < lat["p50"] <= lat["p99"] < 1000
        assert lv["worker_unit_ms"]["count"] > 0
        assert lv["frames_received"] >= lv["units_answered"]
        assert lv["dropped_input_ms"] == lv["late_units"] == lv["context_restarts"] == 0
        assert lv["real_time"] is True

        voice = lv["voice"]
        assert voice["errors"] == {}, voice["error_sample"]
        # Every spoken unit of the window came back as one chunk, well within its second.
        assert 0 < voice["units_spoken"] <= lv["units_closed"]
        assert voice["units_heard"] == voice["units_spoken"] and voice["units_unheard"] == 0
        v = voice["latency_ms"]
        assert v["count"] == voice["units_heard"]
        assert 0 < v["p50"] <= v["p99"] <= v["max"] < 1000
        # A chunk a spoken unit: about a second of audio each (a turn's first 0.84 s,
        # its last 1.12 s).
        share = voice["spoken_share"]
        assert share == pytest.approx(voice["units_spoken"] / lv["units_closed"], abs=1e-3)
        assert 0.8 * share <= voice["audio_s_per_session_s"] <= 1.15 * share
        # A response opened in the window (the model may end a turn and start
        # another): its first audio within the thinker's second and the voice's.
        first = voice["first_audio_ms"]
        assert first["count"] <= voice["responses"]
        if first["count"]:
            assert 0 < first["p50"] <= first["max"] < 2000
        # Every session spoke, so some response opened in the warm-up or the
        # window, and its first audio was timed there.
        warm = voice["first_audio_warmup_ms"]
        assert first["count"] + warm["count"] >= 1
        assert warm["count"] == 0 or 0 < warm["p50"] <= warm["max"]
        # The worker's side: each unit in its own batch or with the other session's.
        assert voice["worker_units"]["spoken"] >= voice["units_heard"]
        assert voice["worker_units"]["dropped"] == 0
        assert 1 <= voice["batch_units_mean"] <= lv["sessions"]
        assert 0 < voice["worker_unit_ms"]["p50"] <= voice["worker_unit_ms"]["p99"]
        assert voice["worker_alive"] is True and voice["real_time"] is True
        assert voice["cpu_pct"] > 0
    assert data["max_real_time_sessions"] == data["max_real_time_sessions_with_voice"] == 2
    assert "| sessions | frames | unit p50 / p99 ms |" in stdout
    assert "| voice p50 / p99 / max ms |" in stdout
    table = run_bench("bench.duplex", "--table", str(out), timeout=60)
    assert table.count("\n| ") == 5  # the header, its rule and three levels
    assert all(line.count("|") == 19 for line in table.splitlines() if line.startswith("|"))


def test_minicpmo_s_no_voice_keeps_the_thinker_alone_at_the_worker_s_own_share() -> None:
    """`--no-voice`: stage0 alone, as the first MiniCPM-o results were made (no
    stage1 section, vLLM's share of the card left to the worker's setting)."""
    from bench.duplex.__main__ import parse
    from bench.duplex.workers import worker_profile

    ports = dict.fromkeys(("stage0", "stage0_metrics", "stage1", "stage1_metrics"), 0)
    argv = ["--model", "minicpmo", "--device", "cpu", "--levels", "16,32", "--frames-at", "16"]
    alone = worker_profile(parse([*argv, "--no-voice"]), ports)
    assert set(alone) == {"common", "stage0"}
    assert "llm_gpu_memory_utilization" not in alone["stage0"]
    voiced = worker_profile(parse([*argv, "--stage0-gpu-memory", "0.6"]), ports)
    assert voiced["stage0"]["llm_gpu_memory_utilization"] == 0.6
    assert voiced["stage1"]["duplex_batch"] == 32
    with pytest.raises(SystemExit):
        parse(["--model", "moshi", "--no-voice"])
