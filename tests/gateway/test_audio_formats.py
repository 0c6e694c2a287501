"""Client audio at the edge: decoding each encoding to PCM16 (G.711, float32, WAV)
and the GA format objects the session is echoed with."""

from __future__ import annotations

import io
import struct
import wave

import numpy as np
import pytest

from antiphon.common import audio_formats as formats
from antiphon.common.audio import float32_to_pcm16
from antiphon.gateway import audio_formats as af
from antiphon.v1 import common_pb2 as cpb


def _samples(pcm16: bytes) -> list[int]:
    return np.frombuffer(pcm16, dtype="<i2").tolist()


def _tone(rate: int, ms: int) -> bytes:
    t = np.arange(rate * ms // 1000) / rate
    return float32_to_pcm16(0.4 * np.sin(2 * np.pi * 300.0 * t))


def test_decode_g711_names_8khz() -> None:
    assert af.decode(b"\xff\xff", formats.G711_ULAW) == af.Pcm(b"\x00\x00" * 2, 8000)
    assert af.decode(b"\xd5", formats.G711_ALAW) == af.Pcm(b"\x08\x00", 8000)


# ------------------------------------------------------------------ float32
def test_f32le_is_scaled_clipped_and_nan_safe() -> None:
    x = np.array([0.0, 1.0, -1.0, 0.25, 3.0, -3.0, np.nan, np.inf], dtype="<f4")
    assert _samples(af.f32le_to_pcm16(x.tobytes())) == [
        0,
        32767,
        -32768,
        8192,
        32767,
        -32768,
        0,
        32767,
    ]


def test_f32le_needs_whole_samples() -> None:
    with pytest.raises(af.AudioDecodeError) as info:
        af.decode(b"\x00" * 5, formats.PCM_F32LE)
    assert info.value.code == "invalid_audio"


def test_pcm16_passes_through_and_needs_whole_samples() -> None:
    assert af.decode(b"\x01\x02", formats.PCM16) == af.Pcm(b"\x01\x02", 0)
    with pytest.raises(af.AudioDecodeError):
        af.decode(b"\x01", formats.PCM16)


# ---------------------------------------------------------------------- WAV
def _stdlib_wav(pcm16: bytes, rate: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm16)
    return buf.getvalue()


def _riff(*chunks: tuple[bytes, bytes], data_size: int | None = None) -> bytes:
    body = b"WAVE"
    for cid, payload in chunks:
        size = data_size if cid == b"data" and data_size is not None else len(payload)
        body += cid + struct.pack("<I", size) + payload + (b"\x00" if len(payload) % 2 else b"")
    return b"RIFF" + struct.pack("<I", len(body)) + body


def _fmt(tag: int, rate: int, bits: int, channels: int = 1) -> bytes:
    align = channels * bits // 8
    return struct.pack("<HHIIHH", tag, channels, rate, rate * align, align, bits)


def test_wav_pcm16_from_the_stdlib_writer() -> None:
    pcm = _tone(16000, 50)
    assert af.wav_to_pcm16(_stdlib_wav(pcm, 16000)) == af.Pcm(pcm, 16000)


def test_wav_float32_is_converted() -> None:
    floats = np.array([0.5, -0.5, 2.0], dtype="<f4").tobytes()
    wav = _riff((b"fmt ", _fmt(3, 24000, 32)), (b"data", floats))
    assert af.wav_to_pcm16(wav) == af.Pcm(af.f32le_to_pcm16(floats), 24000)


def test_wav_extensible_with_an_odd_chunk_before_data() -> None:
    # WAVE_FORMAT_EXTENSIBLE: cbSize, valid bits, channel mask, then the SubFormat GUID.
    ext = _fmt(0xFFFE, 48000, 16) + struct.pack("<HHI", 22, 16, 4) + b"\x01\x00" + b"\x00" * 14
    pcm = _tone(48000, 10)
    wav = _riff((b"fmt ", ext), (b"LIST", b"odd"), (b"data", pcm))
    assert af.wav_to_pcm16(wav) == af.Pcm(pcm, 48000)


@pytest.mark.parametrize("size", [0, 0xFFFFFFFF, 10**6])
def test_streamed_wav_data_runs_to_the_end(size: int) -> None:
    pcm = _tone(8000, 20)
    wav = _riff((b"fmt ", _fmt(1, 8000, 16)), (b"data", pcm), data_size=size)
    assert af.wav_to_pcm16(wav) == af.Pcm(pcm, 8000)


@pytest.mark.parametrize(
    ("wav", "code"),
    [
        (b"not a wav file", "invalid_audio"),
        (_riff((b"data", b"\x00\x00")), "invalid_audio"),  # data before fmt
        (_riff((b"fmt ", _fmt(1, 16000, 16))), "invalid_audio"),  # no data
        (_riff((b"fmt ", b"\x01\x00")), "invalid_audio"),  # fmt truncated
        (_riff((b"fmt ", _fmt(1, 16000, 16)), (b"data", b"\x00\x00\x00")), "invalid_audio"),
        (
            _riff((b"fmt ", _fmt(1, 16000, 16, 2)), (b"data", b"\x00" * 8)),
            "unsupported_audio_format",
        ),
        (_riff((b"fmt ", _fmt(1, 16000, 8)), (b"data", b"\x00" * 8)), "unsupported_audio_format"),
        (_riff((b"fmt ", _fmt(1, 16000, 24)), (b"data", b"\x00" * 6)), "unsupported_audio_format"),
        (_riff((b"fmt ", _fmt(6, 8000, 8)), (b"data", b"\x00" * 8)), "unsupported_audio_format"),
        (_riff((b"fmt ", _fmt(1, 96000, 16)), (b"data", b"\x00" * 8)), "unsupported_audio_format"),
    ],
)
def test_bad_wav_is_a_typed_decode_error(wav: bytes, code: str) -> None:
    with pytest.raises(af.AudioDecodeError) as info:
        af.decode(wav, af.WAV)
    assert info.value.code == code


# --------------------------------------------------------------- GA echo
@pytest.mark.parametrize(
    ("fmt", "ga"),
    [
        (
            cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
            {"type": "audio/pcm", "rate": 24000},
        ),
        (cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000), {"type": "audio/pcmu"}),
        (cpb.AudioFormat(encoding="g711_alaw", sample_rate_hz=8000), {"type": "audio/pcma"}),
        (
            cpb.AudioFormat(encoding="pcm_f32le", sample_rate_hz=16000),
            {"type": "audio/pcm", "rate": 16000, "encoding": "pcm_f32le"},
        ),
    ],
)
def test_ga_format_echo(fmt: cpb.AudioFormat, ga: dict[str, object]) -> None:
    assert af.ga_format(fmt) == ga
