"""GPT-Live's timeline (`live.timeline`): output clocked by the input audio, exact
zeros when the model is quiet, speech placed whole with its transcript span."""

from __future__ import annotations

import base64

import numpy as np

from antiphon.gateway.live.timeline import Timeline
from antiphon.gateway.live.track_format import TrackFormat
from antiphon.v1 import common_pb2 as cpb
from tests.support.live_models import violations

RATE = 24000
FRAME = 1920  # one 80 ms frame at 24 kHz, in samples


def timeline(rate: int = RATE, **kw: int) -> Timeline:
    fmt = cpb.AudioFormat(encoding="pcm16", sample_rate_hz=rate)
    return Timeline(rate, TrackFormat(fmt).convert, **kw)


def speech(n: int = FRAME, value: int = 1000) -> bytes:
    return np.full(n, value, dtype="<i2").tobytes()


def audio(frames: list[dict[str, object]]) -> list[bytes]:
    return [
        base64.b64decode(str(f["delta"]))
        for f in frames
        if f["type"] == "session.output_audio.delta"
    ]


def of(frames: list[dict[str, object]], kind: str) -> list[dict[str, object]]:
    return [f for f in frames if f["type"] == kind]


def test_silence_is_exact_zeros_in_100_ms_deltas_as_the_input_comes() -> None:
    t = timeline()
    out = t.heard(RATE // 5)  # one 200 ms append
    chunks = audio(out)
    assert [len(c) for c in chunks] == [4800, 4800]
    assert all(c == bytes(4800) for c in chunks)
    assert all(not violations(f) for f in out)


def test_output_stalls_when_input_stops_and_resumes_with_it() -> None:
    t = timeline()
    t.heard(RATE // 5)
    # The model talks on while no input comes: nothing goes out.
    out = [f for _ in range(10) for f in t.spoke(speech())]
    assert audio(out) == []
    resumed = t.heard(RATE // 5)
    assert len(audio(resumed)) == 2
    assert any(c != bytes(len(c)) for c in audio(resumed))


def test_speech_starts_after_its_prebuffer_and_its_transcript_span_is_where_it_played() -> None:
    t = timeline()
    frames: list[dict[str, object]] = []
    frames += t.heard(RATE // 10)  # 100 ms of zeros before the model speaks
    for word in ("Hel", "lo", "!"):
        frames += t.spoke(speech())
        frames += t.said(word)
    frames += t.heard(RATE // 2)
    track = b"".join(audio(frames))
    samples = np.frombuffer(track, dtype="<i2")
    first = int(np.flatnonzero(samples)[0])
    assert first == 2400  # placed at 100 ms, the first chunk after it was ready
    spans = [
        (f["delta"], f["start_ms"], f["end_ms"])
        for f in of(frames, "session.output_transcript.delta")
    ]
    assert spans == [("Hel", 100, 180), ("lo", 180, 260), ("!", 260, 340)]
    assert int(np.flatnonzero(samples)[-1]) + 1 == 340 * 24
    assert all(not violations(f) for f in frames)


def test_a_short_utterance_plays_once_the_model_went_quiet() -> None:
    t2 = timeline()
    t2.spoke(speech())
    held = t2.heard(RATE // 10)
    assert audio(held) == [bytes(4800)]  # one frame is below the prebuffer
    t2.quiet()
    played = audio(t2.heard(RATE // 10))
    assert np.count_nonzero(np.frombuffer(played[0], dtype="<i2")) == FRAME


def test_a_queue_that_runs_dry_mid_speech_is_filled_with_zeros_not_stalled() -> None:
    t = timeline(prebuffer_ms=0)
    t.spoke(speech(1200))  # 50 ms
    [chunk] = audio(t.heard(RATE // 10))
    samples = np.frombuffer(chunk, dtype="<i2")
    assert np.count_nonzero(samples[:1200]) == 1200 and not samples[1200:].any()


def test_usage_is_reported_in_whole_seconds_every_period_of_timeline() -> None:
    t = timeline(usage_every_ms=1000)
    frames = [f for _ in range(12) for f in t.heard(RATE // 5)]  # 2.4 s
    usage = of(frames, "session.usage.updated")
    assert [u["usage"] for u in usage] == [{"seconds": 1.0}, {"seconds": 2.0}]
    assert all(not violations(u) for u in usage)


def test_speech_made_while_no_input_came_is_bounded() -> None:
    t = timeline(max_queue_ms=400, prebuffer_ms=0)
    for i in range(20):
        t.spoke(speech(value=i + 1))
    track = np.frombuffer(b"".join(audio(t.heard(RATE))), dtype="<i2")
    # Only the newest 400-480 ms survived: the oldest frames were dropped.
    assert track[0] >= 15
    assert np.count_nonzero(track) <= 6 * FRAME


def test_the_input_clock_is_the_input_rate_and_the_track_the_client_format() -> None:
    t = timeline(rate=16000)
    chunks = [c for _ in range(10) for c in audio(t.heard(16000 // 5))]
    # 2 s of 16 kHz input releases 2 s of 16 kHz output in 20 deltas, less
    # the resampler's delay (some 17 ms), which the next deltas carry.
    assert len(chunks) == 20
    assert 32000 - 400 <= sum(len(c) for c in chunks) // 2 <= 32000
    assert all(c == bytes(len(c)) for c in chunks)
    assert t.now_ms == 2000


def test_g711_silence_is_encoded_silence() -> None:
    fmt = cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000)
    t = Timeline(8000, TrackFormat(fmt).convert)
    chunks = audio(t.heard(8000 // 5))
    assert chunks and all(set(c) == {0xFF} for c in chunks)  # mu-law's zero


def test_a_word_is_told_after_the_delta_that_ends_its_audio_never_before() -> None:
    t = timeline(prebuffer_ms=0)
    t.spoke(speech(2 * FRAME))  # 160 ms: it ends in the second chunk
    assert t.said("long") == []
    first = t.heard(RATE // 10)
    assert of(first, "session.output_transcript.delta") == []
    second = t.heard(RATE // 10)
    [told] = of(second, "session.output_transcript.delta")
    assert (told["start_ms"], told["end_ms"]) == (0, 160)
    assert second.index(told) > 0  # after the audio delta that ends it
