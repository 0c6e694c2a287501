"""The questions a load session asks: spoken PCM16 cut to 200 ms appends.

The caller brings the audio (WAV files, or PCM from any voice); this module
only shapes it for a lane. The manual lane sends the audio as it is, its own
silence kept, and then commits; the live lanes (`server_vad`,
`semantic_vad`, native) send the speech alone, from its first to its last
loud sample, padded to whole chunks, and the microphone goes on with
silence after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from antiphon.client import audio

CHUNK_MS = 200  # one append per 200 ms of audio, as a browser sends it
INPUT_RATE = audio.WIRE_RATE  # the session's input rate: OpenAI's default, PCM16 mono
CHUNK_BYTES = audio.chunk_bytes(CHUNK_MS, INPUT_RATE)


@dataclass(frozen=True)
class Question:
    """A spoken question: PCM16 mono at 24 kHz; `speech_end` indexes the last
    200 ms chunk holding speech (the end of speech on the client clock is the
    send of that chunk)."""

    text: str
    pcm16: bytes
    speech_end: int

    @property
    def chunks(self) -> int:
        return -(-len(self.pcm16) // CHUNK_BYTES)

    @property
    def audio_ms(self) -> int:
        return self.chunks * CHUNK_MS

    @property
    def speech_end_ms(self) -> int:
        """Where the end of speech is: the end of the last chunk holding speech."""
        return (self.speech_end + 1) * CHUNK_MS


def _loud(pcm16: bytes) -> np.ndarray[tuple[int], np.dtype[np.intp]]:
    """Indexes of the samples that are speech: above 1% of the peak (and 200)."""
    samples = np.abs(np.frombuffer(pcm16, dtype="<i2").astype(np.int32))
    if not samples.size:
        return np.zeros(0, dtype=np.intp)
    return np.flatnonzero(samples > max(200, int(samples.max()) // 100))


def trim_leading_silence(pcm16: bytes, threshold: int = 500) -> bytes:
    samples = np.frombuffer(pcm16, dtype="<i2")
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > threshold)
    return pcm16[int(loud[0]) * 2 :] if loud.size else pcm16


def manual_question(text: str, pcm16: bytes) -> Question:
    """The audio as it is (its own leading and trailing silence kept), then a
    commit: the manual lane as it has always been measured."""
    loud = _loud(pcm16)
    last = int(loud[-1]) * 2 if loud.size else len(pcm16) - 1
    return Question(text, pcm16, max(0, last) // CHUNK_BYTES)


def live_question(text: str, pcm16: bytes) -> Question:
    """Speech from its first to its last loud sample, padded with silence to
    whole 200 ms chunks: the last chunk holds the end of speech, and what the
    live microphone sends after it is silence."""
    loud = _loud(pcm16)
    if loud.size:
        pcm16 = pcm16[int(loud[0]) * 2 : (int(loud[-1]) + 1) * 2]
    pcm16 += b"\x00" * (-len(pcm16) % CHUNK_BYTES)
    return Question(text, pcm16, max(0, len(pcm16) // CHUNK_BYTES - 1))


def shape(lane: str, text: str, pcm16: bytes) -> Question:
    """`pcm16` shaped for `lane`: manual keeps its silence, the live lanes trim it."""
    return manual_question(text, pcm16) if lane == "manual" else live_question(text, pcm16)


def from_wav(path: str | Path, lane: str) -> Question:
    """A WAV file (any rate, any channels: converted to 24 kHz mono) as a question."""
    return shape(lane, Path(path).name, audio.read_wav(path, INPUT_RATE))
