"""PCM16 audio for a client: WAV files in and out, resampling, silence, pacing sizes.

The wire carries little-endian 16-bit mono PCM (24 kHz unless the session
says otherwise), base64 inside JSON; these helpers keep that arithmetic in
one place.
"""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np

WIRE_RATE = 24000  # OpenAI's PCM rate, in and out
# The PCM16 input rates the server takes without conversion (16 kHz is an extension).
INPUT_RATES = (16000, 24000)


def read_wav(path: str | Path, rate: int = WIRE_RATE) -> bytes:
    """A WAV file as PCM16 mono at `rate` (channels are mixed down, the rate converted)."""
    with wave.open(str(path), "rb") as wav:
        if wav.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM WAV files are read")
        frames = wav.readframes(wav.getnframes())
        channels, source_rate = wav.getnchannels(), wav.getframerate()
    samples = np.frombuffer(frames, dtype="<i2").reshape(-1, channels).mean(axis=1)
    return resample(samples.astype("<i2").tobytes(), source_rate, rate)


def wav_rate(path: str | Path) -> int:
    with wave.open(str(path), "rb") as wav:
        return wav.getframerate()


def wav_bytes(pcm16: bytes, rate: int = WIRE_RATE) -> bytes:
    """`pcm16` (mono) as the bytes of a WAV file."""
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(pcm16)
    return out.getvalue()


def write_wav(path: str | Path, pcm16: bytes, rate: int = WIRE_RATE) -> None:
    Path(path).write_bytes(wav_bytes(pcm16, rate))


def resample(pcm16: bytes, source_rate: int, rate: int) -> bytes:
    """Linear interpolation: good enough for speech going to a VAD and ASR."""
    if source_rate == rate or not pcm16:
        return pcm16
    samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float32)
    count = max(1, round(len(samples) * rate / source_rate))
    at = np.linspace(0, len(samples) - 1, count)
    out = np.interp(at, np.arange(len(samples)), samples)
    return np.clip(np.round(out), -32768, 32767).astype("<i2").tobytes()


def silence(ms: int, rate: int = WIRE_RATE) -> bytes:
    return b"\x00\x00" * (rate * ms // 1000)


def chunk_bytes(chunk_ms: int, rate: int = WIRE_RATE) -> int:
    """The bytes of `chunk_ms` of PCM16 mono at `rate`."""
    return rate * chunk_ms // 1000 * 2


def duration_ms(pcm16: bytes, rate: int = WIRE_RATE) -> float:
    return len(pcm16) / 2 / rate * 1000
