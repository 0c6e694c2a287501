"""What `bench.load` reports of a level from the workers' own metrics: stage1's
first audio and its parts (bench.lib.loadstack), and the preemptive answers'
counters of every front end (bench.lib.firstaudio), read over HTTP from real
registries the way the workers serve them."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter

from antiphon.session.metrics import SessionMetrics
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage1.metrics import Stage1Metrics
from bench.lib.firstaudio import Preemptive, print_table
from bench.lib.loadstack import StageLatencies
from tests.bench.serving import Serve, served


def test_stage1s_first_audio_is_reported_with_its_parts_over_the_level_only(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    workers, ports = served(serve, Stage1Metrics, 2)
    workers[0].first_audio.observe(5.0)  # before the level: not its own
    stages = StageLatencies([], ports)
    parts = ((0.1, 0.02, 0.03), (0.3, 0.0, 0.05))  # words, queue, voice (s)
    for worker, (words, queue, voice) in zip(workers, parts, strict=True):
        worker.first_audio_words.observe(words)
        worker.first_audio_queue.observe(queue)
        worker.first_audio_voice.observe(voice)
        worker.first_audio.observe(words + queue + voice)
    out = stages.delta()
    assert out["stage1_first_audio"]["count"] == 2
    assert out["stage1_first_audio"]["mean_ms"] == pytest.approx(250.0)
    assert out["stage1_first_audio_words"]["mean_ms"] == pytest.approx(200.0)
    assert out["stage1_first_audio_queue"]["mean_ms"] == pytest.approx(10.0)
    assert out["stage1_first_audio_voice"]["mean_ms"] == pytest.approx(40.0)
    assert out["stage1_first_audio_words"]["p95_ms_at_most"] == 350.0
    print_table("cascade", [{"sessions": 2, "stages": out}], header=False)
    assert "250 = 200+10+40" in capsys.readouterr().out


def test_the_preemptive_counters_are_every_front_ends_and_session_replicas(serve: Serve) -> None:
    replicas = [CollectorRegistry() for _ in range(2)]
    answers, other = (
        Counter("antiphon_session_preemptive_answers", "", ["outcome"], registry=r)
        for r in replicas
    )
    front_ends = [CollectorRegistry() for _ in range(2)]
    pauses = [
        Counter("antiphon_stage0_utterance_pauses", "", ["outcome"], registry=r) for r in front_ends
    ]
    preemptive = Preemptive([serve(r) for r in replicas], [serve(r) for r in front_ends])
    preemptive.mark()
    answers.labels("started").inc(3)
    answers.labels("used").inc()
    other.labels("used").inc()
    answers.labels("speech_resumed").inc()
    pauses[0].labels("reported").inc()
    pauses[1].labels("reported").inc(2)
    pauses[1].labels("ended").inc()
    assert preemptive.delta() == {
        "session": {"started": 3, "used": 2, "speech_resumed": 1},
        "stage0_pauses": {"reported": 3, "resumed": 0, "ended": 1},
    }


def test_the_workers_event_loop_lag_and_batches_are_reported_over_the_level(
    serve: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    """Time no stage's clock holds: how late each front end's loop ran, and the
    session's (the relay of every append and every answer's audio)."""
    front_ends, ports = served(serve, Stage0Metrics, 2)
    (session,), session_port = served(serve, SessionMetrics, 1)
    front_ends[0].loop_lag.observe(2.0)  # before the level: not its own
    stages = StageLatencies(ports, [], session_port)
    front_ends[0].loop_lag.observe(0.004)
    front_ends[1].loop_lag.observe(0.036)
    session.loop_lag.observe(0.25)
    for size in (1, 2, 3):
        front_ends[1].vad_batch_size.observe(size)
    front_ends[0].turn_batch_size.observe(8)
    out = stages.delta()
    assert out["stage0_event_loop_lag"]["count"] == 2
    assert out["stage0_event_loop_lag"]["mean_ms"] == pytest.approx(20.0)
    assert out["session_event_loop_lag"]["count"] == 1
    assert out["session_event_loop_lag"]["p99_ms_at_most"] == 350.0  # a bucket bound
    assert out["gateway_event_loop_lag"]["count"] == 0
    assert out["stage0_vad_batch_size"] == {"batches": 3, "mean": 2.0}
    assert out["stage0_turn_batch_size"] == {"batches": 1, "mean": 8.0}
    print_table("cascade", [{"sessions": 2, "stages": out}], header=True)
    header, row = capsys.readouterr().out.splitlines()
    assert row[header.index("loop lag ms s0/session") :].startswith("20.0/250.0 ")
