"""Silero VAD (batched) and the endpointer that turns probabilities into turn events."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from unittest.mock import patch

import numpy as np
import pytest

from antiphon.stage0.assets import Stage0Assets
from antiphon.stage0.backends.cascade.listening.vad import (
    FRAME_MS,
    Endpointer,
    EndpointerConfig,
    SileroVad,
    SpeechStarted,
    SpeechStopped,
    VadBatcher,
    VadEvent,
)


def silence(ms: int) -> bytes:
    return bytes(16 * ms * 2)


def run(endpointer: Endpointer, probabilities: list[float]) -> list[VadEvent]:
    events = [endpointer.update(p) for p in probabilities]
    return [e for e in events if e is not None]


def frames(ms: int) -> int:
    return ms // FRAME_MS


# ------------------------------------------------------------ endpointer (pure)


def test_endpointer_reports_onset_with_prefix_padding_and_offset_after_silence() -> None:
    cfg = EndpointerConfig(prefix_padding_ms=300, silence_duration_ms=480, min_speech_ms=96)
    probs = [0.0] * 20 + [0.9] * 30 + [0.0] * 20
    events = run(Endpointer(cfg), probs)
    onset, offset = 20 * FRAME_MS, 50 * FRAME_MS
    assert events == [
        SpeechStarted(audio_start_ms=onset - 300, onset_ms=onset),
        SpeechStopped(audio_end_ms=offset + 480, offset_ms=offset),
    ]


def test_endpointer_ignores_blips_shorter_than_min_speech() -> None:
    cfg = EndpointerConfig(min_speech_ms=200)
    assert run(Endpointer(cfg), [0.0, 0.9, 0.9, 0.9, 0.0, 0.0] * 10) == []


def test_endpointer_keeps_speech_through_pauses_shorter_than_silence_duration() -> None:
    cfg = EndpointerConfig(silence_duration_ms=500)
    probs = [0.9] * 10 + [0.0] * frames(400) + [0.9] * 10 + [0.0] * frames(600)
    events = run(Endpointer(cfg), probs)
    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped]


def test_endpointer_hysteresis_does_not_start_silence_between_thresholds() -> None:
    cfg = EndpointerConfig(threshold=0.5, silence_duration_ms=200)
    events = run(Endpointer(cfg), [0.9] * 10 + [0.4] * 50)
    assert [type(e) for e in events] == [SpeechStarted]


def test_endpointer_padding_never_reaches_into_the_previous_utterance() -> None:
    cfg = EndpointerConfig(prefix_padding_ms=1000, silence_duration_ms=320, min_speech_ms=32)
    probs = [0.9] * 10 + [0.0] * 10 + [0.0] * 2 + [0.9] * 5
    started = [e for e in run(Endpointer(cfg), probs) if isinstance(e, SpeechStarted)]
    assert started[0].audio_start_ms == 0
    # The first utterance's audio ended at frame 20 (10 speech + 320 ms silence).
    assert started[1].audio_start_ms == 20 * FRAME_MS


def test_endpointer_rejects_impossible_config() -> None:
    with pytest.raises(ValueError):
        EndpointerConfig(threshold=1.5)
    with pytest.raises(ValueError):
        EndpointerConfig(silence_duration_ms=-1)


# ------------------------------------------------------------ Silero on real audio


@pytest.fixture(scope="module")
def vad(assets: Stage0Assets) -> SileroVad:
    return SileroVad(assets.vad_onnx, threads=1)


@pytest.fixture(scope="module")
def sentence(say: Callable[[str], bytes]) -> bytes:
    return say("The quick brown fox jumps over the lazy dog.")


def _speech_bounds_ms(pcm: bytes) -> tuple[int, int]:
    samples = np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.int32))
    loud = np.nonzero(samples > 300)[0]
    return int(loud[0]) // 16, int(loud[-1]) // 16


@pytest.mark.models
def test_vad_finds_onset_and_offset_of_real_speech(vad: SileroVad, sentence: bytes) -> None:
    audio = silence(1000) + sentence + silence(1500)
    stream = vad.stream(EndpointerConfig(silence_duration_ms=500, prefix_padding_ms=300))
    events: list[VadEvent] = []
    for i in range(0, len(audio), 3200):  # 100 ms appends, as clients send them
        events += stream.feed(audio[i : i + 3200])
    first, last = _speech_bounds_ms(sentence)
    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped]
    started, stopped = events
    assert isinstance(started, SpeechStarted) and isinstance(stopped, SpeechStopped)
    assert 1000 + first - 100 <= started.onset_ms <= 1000 + first + 400
    assert started.audio_start_ms == started.onset_ms - 300
    assert 1000 + last - 300 <= stopped.offset_ms <= 1000 + last + 300
    assert stopped.audio_end_ms >= stopped.offset_ms + 500


@pytest.mark.models
def test_vad_gives_no_events_on_silence(vad: SileroVad) -> None:
    stream = vad.stream()
    assert stream.feed(silence(3000)) == []
    assert stream.endpointer.now_ms == 3000 // FRAME_MS * FRAME_MS


@pytest.mark.models
def test_vad_events_do_not_depend_on_how_audio_is_chunked(vad: SileroVad, sentence: bytes) -> None:
    audio = silence(500) + sentence + silence(1000)
    whole = vad.stream().feed(audio)
    ragged = vad.stream()
    pieces: list[VadEvent] = []
    step = 777  # odd: splits samples across appends
    for i in range(0, len(audio), step):
        pieces += ragged.feed(audio[i : i + step])
    assert whole and pieces == whole


@pytest.mark.models
def test_batched_step_matches_each_stream_alone(vad: SileroVad, sentence: bytes) -> None:
    audios = [
        silence(300) + sentence + silence(900),
        silence(len(sentence) // 32 + 1200),
        silence(900) + sentence + silence(300),
    ]
    alone = [vad.stream().feed(a) for a in audios]
    streams = [vad.stream() for _ in audios]
    for stream, audio in zip(streams, audios, strict=True):
        stream.push(audio)
    batched: list[list[VadEvent]] = [[] for _ in streams]
    while any(s.pending_frames for s in streams):
        ready = [i for i, s in enumerate(streams) if s.pending_frames]
        for i, events in zip(ready, vad.step([streams[i] for i in ready]), strict=True):
            batched[i] += events
    assert batched == alone
    assert alone[1] == [] and alone[0] and alone[2]


@pytest.mark.models
def test_step_refuses_a_stream_twice_in_one_batch(vad: SileroVad) -> None:
    stream = vad.stream()
    stream.push(silence(100))
    with pytest.raises(ValueError):
        vad.step([stream, stream])


def test_endpointer_reset_ends_speech_silently_and_pads_no_further_back() -> None:
    cfg = EndpointerConfig(prefix_padding_ms=300, min_speech_ms=32)
    endpointer = Endpointer(cfg)
    assert [type(e) for e in run(endpointer, [0.9] * 20)] == [SpeechStarted]
    endpointer.reset()
    assert not endpointer.in_speech
    events = run(endpointer, [0.9])
    assert events == [SpeechStarted(audio_start_ms=20 * FRAME_MS, onset_ms=20 * FRAME_MS)]


@pytest.mark.models
def test_clear_keeps_the_audio_clock(vad: SileroVad) -> None:
    stream = vad.stream()
    stream.feed(bytes(1000))  # less than a frame: held back
    stream.clear()
    stream.feed(bytes(1048))
    assert stream.endpointer.now_ms == 2 * FRAME_MS


@pytest.mark.models
async def test_batcher_runs_sessions_together_with_the_events_each_gets_alone(
    vad: SileroVad, sentence: bytes
) -> None:
    audios = [silence(300) + sentence + silence(900), silence(900) + sentence + silence(300)]
    alone = [vad.stream().feed(a) for a in audios]
    sizes: list[int] = []
    batcher = VadBatcher(vad, observe_batch=sizes.append)
    streams = [vad.stream() for _ in audios]
    got: list[list[VadEvent]] = [[] for _ in audios]
    chunk = 6400  # 200 ms appends, both sessions in the same loop turn
    for i in range(0, max(len(a) for a in audios), chunk):
        for n, (stream, audio) in enumerate(zip(streams, audios, strict=True)):
            if audio[i : i + chunk]:
                stream.push(audio[i : i + chunk])
                batcher.submit(stream, got[n].extend)
        await asyncio.sleep(0)
    await batcher.idle()
    assert got == alone
    assert max(sizes) == 2  # the two sessions' frames shared model calls


@pytest.mark.models
async def test_batcher_drops_a_discarded_stream(vad: SileroVad, sentence: bytes) -> None:
    batcher = VadBatcher(vad)
    stream = vad.stream()
    got: list[VadEvent] = []
    stream.push(sentence + silence(1000))
    batcher.submit(stream, got.extend)
    batcher.discard(stream)
    await batcher.idle()
    assert got == [] and stream.pending_frames > 0


@pytest.mark.models
async def test_batcher_leaves_the_event_loop_free_while_the_model_runs(
    vad: SileroVad, sentence: bytes
) -> None:
    """Other sessions' work runs between (and during) the VAD's model calls."""
    batcher = VadBatcher(vad)
    streams = [vad.stream() for _ in range(64)]
    delivered: list[int] = []

    def heard(n: int) -> Callable[[list[VadEvent]], None]:
        return lambda _events: delivered.append(n)

    for n, stream in enumerate(streams):
        stream.push(sentence)
        batcher.submit(stream, heard(n))
    calls = streams[0].pending_frames
    ticks = 0

    async def other_sessions() -> None:
        nonlocal ticks
        while len(delivered) < len(streams):
            ticks += 1
            await asyncio.sleep(0)

    await asyncio.gather(other_sessions(), batcher.idle())
    assert sorted(delivered) == list(range(64))
    # Inline on the loop, the whole backlog ran in one callback: a tick or two.
    assert ticks >= calls, (ticks, calls)


@pytest.mark.models
@pytest.mark.parametrize("offload_at", [1, 16])
async def test_a_call_smaller_than_offload_at_runs_inline_and_others_in_the_executor(
    vad: SileroVad, sentence: bytes, offload_at: int
) -> None:
    """One session's frames: inline on the loop by default, off it at `offload_at` 1."""
    threads: list[str] = []
    infer = vad.infer

    def recording(*args: object) -> object:
        threads.append(threading.current_thread().name)
        return infer(*args)  # type: ignore[arg-type]

    batcher = VadBatcher(vad, offload_at=offload_at)
    stream = vad.stream()
    stream.push(sentence)
    with patch.object(vad, "infer", recording):
        batcher.submit(stream, lambda _events: None)
        await batcher.idle()
    assert threads
    assert {name.startswith("vad") for name in threads} == {offload_at == 1}
