"""How the load generator shapes a question for its lane: the manual lane
sends the audio as it is, the live lanes the speech alone in whole chunks,
and both know which chunk ends the speech."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from antiphon.client import audio
from antiphon.client.load import (
    CHUNK_BYTES,
    from_wav,
    live_question,
    manual_question,
    trim_leading_silence,
)

RATE = 24000


def tone(ms: int, amplitude: int = 8000) -> bytes:
    t = np.arange(RATE * ms // 1000) / RATE
    return (amplitude * np.sin(2 * np.pi * 220 * t)).astype("<i2").tobytes()


def test_the_manual_lane_keeps_the_silence_and_ends_speech_at_the_last_loud_chunk() -> None:
    pcm = audio.silence(300) + tone(500) + audio.silence(700)
    q = manual_question("q", pcm)
    assert q.pcm16 == pcm
    # Speech ends just before 800 ms: in the chunk from 600 to 800 ms.
    assert q.speech_end == 3 and q.speech_end_ms == 800
    assert q.chunks == 8 and q.audio_ms == 1600


def test_a_live_question_is_the_speech_alone_padded_to_whole_chunks() -> None:
    q = live_question("q", audio.silence(300) + tone(500) + audio.silence(700))
    assert len(q.pcm16) % CHUNK_BYTES == 0
    assert q.chunks == 3  # 500 ms of speech in three 200 ms chunks
    assert q.speech_end == q.chunks - 1 and q.speech_end_ms == 600
    assert np.abs(np.frombuffer(q.pcm16[:480], dtype="<i2")).max() > 0  # starts with speech


def test_leading_silence_is_trimmed_to_the_onset() -> None:
    trimmed = trim_leading_silence(audio.silence(400) + tone(200))
    # The tone's first samples are below the threshold too: a millisecond at most.
    assert tone(200).endswith(trimmed) and len(tone(200)) - len(trimmed) < RATE * 2 // 1000


def test_a_wav_file_of_any_rate_becomes_a_question_at_24_khz(tmp_path: Path) -> None:
    path = tmp_path / "q.wav"
    pcm16k = audio.resample(tone(1000), RATE, 16000)
    audio.write_wav(path, pcm16k, 16000)
    q = from_wav(path, "manual")
    assert q.text == "q.wav"
    assert abs(len(q.pcm16) - len(tone(1000))) <= 4
