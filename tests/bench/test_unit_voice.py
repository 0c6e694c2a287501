"""bench/duplex/unit_voice.py: a unit model's frames forwarded to its voice as the
session service forwards them, and the voice's audio matched back to them."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

import pytest

from antiphon.v1 import stage_pb2 as pb
from bench.duplex.clients import Schedule, SessionRecord
from bench.duplex.unit_voice import (
    UnitVoice,
    first_audio,
    summarize_voice,
    voice_real_time,
    worker_voice,
)

# The window is [10, 20); unit i closed at 10 + i (frames come 0.1 s later).
SCHED = Schedule(start=0.0, window_start=10.0, end=20.0)


def speak(index: int, tokens: list[int], *, ended: bool = False) -> pb.ModelFrame:
    return pb.ModelFrame(
        index=index,
        decision=pb.DECISION_SPEAK,
        tokens=tokens,
        text=f" u{index}",
        turn_ended=ended,
    )


def listen(index: int) -> pb.ModelFrame:
    return pb.ModelFrame(index=index, decision=pb.DECISION_LISTEN)


def chunk(response_id: str, ms: int = 1000) -> pb.Stage1Event:
    return pb.Stage1Event(audio=pb.AudioChunk(response_id=response_id, duration_ms=ms))


class Session:
    def __init__(self, units: int = 8) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.rec = SessionRecord(0)
        closed = {i: 10.0 + i for i in range(units)}
        self.voice = UnitVoice("s", self.queue, self.rec, SCHED, closed)

    def sent(self) -> list[tuple[str, str, int]]:
        """(kind, response id, unit index or -1) of what went to stage1."""
        out = []
        while not self.queue.empty():
            req = self.queue.get_nowait()
            if req.HasField("frame"):
                out.append(("frame", req.frame.response_id, req.frame.index))
            else:
                assert req.text.final
                out.append(("final", req.text.response_id, -1))
        return out


def test_spoken_units_go_in_one_response_until_the_model_ends_its_turn_or_listens() -> None:
    s = Session()
    s.voice.frame(listen(0), 10.1)
    s.voice.frame(speak(1, [5, 6]), 11.1)
    s.voice.frame(speak(2, [7], ended=True), 12.1)
    s.voice.frame(speak(3, [8]), 13.1)
    s.voice.frame(listen(4), 14.1)
    s.voice.frame(listen(5), 15.1)
    assert s.sent() == [
        ("frame", "", 0),
        ("frame", "s-r1", 1),
        ("frame", "s-r1", 2),
        ("final", "s-r1", -1),
        ("frame", "s-r2", 3),
        ("final", "s-r2", -1),  # the first LISTEN after it spoke ends the response
        ("frame", "", 4),
        ("frame", "", 5),
    ]
    assert (s.rec.voice_units, s.rec.voice_responses) == (3, 2)


def test_chunks_are_matched_to_spoken_units_in_order_and_time_the_first_audio() -> None:
    s = Session()
    s.voice.frame(speak(1, [5]), 11.1)
    s.voice.frame(speak(2, [6], ended=True), 12.1)
    s.voice.frame(speak(3, [7]), 13.1)
    s.voice.event(chunk("s-r1", 840), 11.3)
    s.voice.event(chunk("s-r1", 1120), 12.25)
    s.voice.event(chunk("s-r2", 840), 13.4)
    rec = s.rec
    assert rec.voice_latency_ms == pytest.approx([200, 150, 300])
    # From the append that closed each response's first unit.
    assert rec.first_audio_ms == pytest.approx([300, 400])
    assert rec.voice_units_heard == 3 and rec.voice_audio_ms == 840 + 1120 + 840


def test_a_chunk_of_a_later_response_means_the_older_one_s_units_got_none() -> None:
    s = Session()
    s.voice.frame(speak(1, [5]), 11.1)
    s.voice.frame(speak(2, [6], ended=True), 12.1)
    s.voice.frame(speak(3, [7]), 13.1)
    s.voice.event(chunk("s-r1"), 11.3)
    s.voice.event(chunk("s-r2"), 13.3)  # unit 2's never came
    s.voice.event(pb.Stage1Event(error=pb.StageError(code="model_error", message="x")), 13.4)
    rec = s.rec
    assert rec.voice_latency_ms == pytest.approx([200, 200])
    assert (rec.voice_units, rec.voice_units_heard) == (3, 2)
    assert rec.voice_error == "stage1 model_error: x" and rec.voice_error_events == 1
    summary = summarize_voice([asdict(rec) | {"units_closed": 10}], sessions=1, window_s=10)
    assert summary["units_unheard"] == 1 and summary["errors"] == {"stage1 model_error": 1}
    assert summary["audio_s_per_session_s"] == 0.2 and summary["spoken_share"] == 0.3


def test_units_closed_outside_the_window_are_forwarded_but_not_counted() -> None:
    s = Session()
    early = UnitVoice("s", s.queue, s.rec, SCHED, {0: 9.5, 1: 20.5})
    early.frame(speak(0, [5]), 9.6)
    early.frame(speak(1, [6]), 20.6)
    early.event(chunk("s-r1"), 9.9)
    early.event(chunk("s-r1"), 20.9)
    assert len(s.sent()) == 2
    assert (s.rec.voice_units, s.rec.voice_units_heard, s.rec.voice_latency_ms) == (0, 0, [])


def test_a_response_opened_in_the_warm_up_times_its_first_audio_apart() -> None:
    """A thinker that speaks from a session's first unit opens its one
    response in the warm-up: its first audio is kept apart from the
    window's and shown where the window has none."""
    s = Session()
    voice = UnitVoice("s", s.queue, s.rec, SCHED, {0: 9.5, 1: 10.5, 2: 11.5, 3: 21.0})
    voice.frame(speak(0, [5], ended=True), 9.6)
    voice.frame(speak(1, [6], ended=True), 10.6)
    voice.frame(speak(3, [8]), 21.1)  # closed past the window: not timed
    voice.event(chunk("s-r1"), 10.0)
    voice.event(chunk("s-r2"), 10.9)
    voice.event(chunk("s-r3"), 21.5)
    assert s.rec.first_audio_warmup_ms == pytest.approx([500])
    assert s.rec.first_audio_ms == pytest.approx([400])
    summary = summarize_voice([asdict(s.rec) | {"units_closed": 10}], sessions=1, window_s=10)
    assert summary["first_audio_warmup_ms"]["p50"] == pytest.approx(500)
    assert first_audio(summary) == (summary["first_audio_ms"], "")
    warm_only = summary | {"first_audio_ms": {"count": 0, "p50": None, "p99": None, "max": None}}
    assert first_audio(warm_only) == (summary["first_audio_warmup_ms"], " (warm-up)")


def test_the_worker_s_metrics_and_the_voice_s_real_time() -> None:
    before = {
        'antiphon_stage1_duplex_units_total{outcome="spoken"}': 4.0,
        "antiphon_stage1_duplex_batch_units_count": 2.0,
        "antiphon_stage1_duplex_batch_units_sum": 2.0,
    }
    after = {
        'antiphon_stage1_duplex_units_total{outcome="spoken"}': 10.0,
        'antiphon_stage1_duplex_units_total{outcome="silent"}': 1.0,
        "antiphon_stage1_duplex_batch_units_count": 5.0,
        "antiphon_stage1_duplex_batch_units_sum": 8.0,
        'antiphon_stage1_duplex_unit_seconds_bucket{le="0.1"}': 6.0,
        'antiphon_stage1_duplex_unit_seconds_bucket{le="+Inf"}': 6.0,
        "antiphon_stage1_duplex_unit_seconds_count": 6.0,
        "antiphon_stage1_duplex_unit_seconds_sum": 0.3,
    }
    worker = worker_voice(before, after)
    assert worker["worker_units"] == {"spoken": 6.0, "silent": 1.0, "dropped": 0.0}
    assert (worker["batches"], worker["batch_units_mean"]) == (3, 2.0)
    assert worker["worker_unit_ms"]["count"] == 6 and worker["worker_unit_ms"]["mean"] == 50.0

    rec = SessionRecord(0, units_closed=10, voice_units=6, voice_units_heard=6)
    rec.voice_latency_ms = [120.0] * 5 + [999.0]
    voice = summarize_voice([asdict(rec)], sessions=1, window_s=10) | worker
    assert voice_real_time(voice)
    assert not voice_real_time(voice | {"latency_ms": voice["latency_ms"] | {"max": 1000.0}})
    assert not voice_real_time(voice | {"units_unheard": 1})
    assert not voice_real_time(voice | {"worker_units": {"dropped": 1.0}})
    assert not voice_real_time(voice | {"units_spoken": 0})
