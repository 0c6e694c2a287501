"""Edge codecs: G.711 from the ITU definition, float32, WAV, and output encoding."""

from __future__ import annotations

import io
import struct
import wave
from collections.abc import Callable

import numpy as np
import pytest

from antiphon.common.audio import float32_to_pcm16
from antiphon.gateway import audio_formats as af
from antiphon.session import session_config
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

Codec = Callable[[bytes], bytes]
ALL_CODES = bytes(range(256))
ALL_PCM16 = np.arange(-32768, 32768, dtype="<i2").tobytes()


def _samples(pcm16: bytes) -> list[int]:
    return np.frombuffer(pcm16, dtype="<i2").tolist()


def _tone(rate: int, ms: int) -> bytes:
    t = np.arange(rate * ms // 1000) / rate
    return float32_to_pcm16(0.4 * np.sin(2 * np.pi * 300.0 * t))


# -------------------------------------------------------------------- G.711
@pytest.mark.parametrize(
    ("code", "value"),
    [
        (0xFF, 0),  # positive zero
        (0x7F, 0),  # negative zero
        (0x80, 32124),  # largest positive
        (0x00, -32124),  # largest negative
        (0xFE, 8),  # one step above zero (segment 0 steps by 8)
        (0xF0, 120),  # the top of segment 0
        (0xEF, 132),  # the bottom of segment 1, which steps by 16
    ],
)
def test_ulaw_known_code_points(code: int, value: int) -> None:
    assert _samples(af.ulaw_to_pcm16(bytes([code]))) == [value]


@pytest.mark.parametrize(
    ("code", "value"),
    [
        (0xD5, 8),  # smallest positive: even bits inverted on the line
        (0x55, -8),
        (0xAA, 32256),  # largest positive
        (0x2A, -32256),
        (0xD4, 24),
    ],
)
def test_alaw_known_code_points(code: int, value: int) -> None:
    assert _samples(af.alaw_to_pcm16(bytes([code]))) == [value]


def test_ulaw_encode_of_decode_is_the_identity_but_for_negative_zero() -> None:
    """Every code decodes to a level that encodes back to it; 0x7F and 0xFF
    both decode to 0, which encodes as positive zero."""
    again = af.pcm16_to_ulaw(af.ulaw_to_pcm16(ALL_CODES))
    assert [c for c in range(256) if again[c] != c] == [0x7F]
    assert again[0x7F] == 0xFF


def test_alaw_encode_of_decode_is_the_identity_for_all_256_codes() -> None:
    assert af.pcm16_to_alaw(af.alaw_to_pcm16(ALL_CODES)) == ALL_CODES


@pytest.mark.parametrize(
    ("encode", "decode"),
    [(af.pcm16_to_ulaw, af.ulaw_to_pcm16), (af.pcm16_to_alaw, af.alaw_to_pcm16)],
)
def test_g711_decode_tables_are_odd_symmetric_and_monotonic(encode: Codec, decode: Codec) -> None:
    levels = np.array(_samples(decode(ALL_CODES)))
    assert sorted(set(levels)) == sorted(set(-levels))
    # Encoding every 16-bit value is monotonic: larger input never gets a smaller level.
    quantised = np.array(_samples(decode(encode(ALL_PCM16))))
    assert (np.diff(quantised) >= 0).all()
    assert quantised[0] == levels.min() and quantised[-1] == levels.max()


@pytest.mark.parametrize(
    ("encode", "decode", "max_rel"),
    [(af.pcm16_to_ulaw, af.ulaw_to_pcm16, 0.07), (af.pcm16_to_alaw, af.alaw_to_pcm16, 0.07)],
)
def test_g711_round_trip_error_is_small_relative_to_the_level(
    encode: Codec, decode: Codec, max_rel: float
) -> None:
    """Companding keeps the relative error small (about 1/32 of the level) over
    the range above the smallest segments."""
    x = np.array(_samples(ALL_PCM16))
    y = np.array(_samples(decode(encode(ALL_PCM16))))
    loud = np.abs(x) > 1024
    assert (np.abs(y - x)[loud] / np.abs(x)[loud]).max() < max_rel
    assert np.abs(y - x)[~loud].max() <= 64


def test_g711_matches_audioop_where_python_still_has_it() -> None:
    """The stdlib's C implementation (gone in Python 3.13) as an independent oracle."""
    audioop = pytest.importorskip("audioop")
    assert af.pcm16_to_ulaw(ALL_PCM16) == audioop.lin2ulaw(ALL_PCM16, 2)
    assert af.pcm16_to_alaw(ALL_PCM16) == audioop.lin2alaw(ALL_PCM16, 2)
    assert af.ulaw_to_pcm16(ALL_CODES) == audioop.ulaw2lin(ALL_CODES, 2)
    assert af.alaw_to_pcm16(ALL_CODES) == audioop.alaw2lin(ALL_CODES, 2)


def test_g711_tables_are_read_only() -> None:
    with pytest.raises(ValueError):
        af._ulaw_encode_table()[0] = 1


def test_decode_g711_names_8khz() -> None:
    assert af.decode(b"\xff\xff", af.G711_ULAW) == af.Pcm(b"\x00\x00" * 2, 8000)
    assert af.decode(b"\xd5", af.G711_ALAW) == af.Pcm(b"\x08\x00", 8000)


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
        af.decode(b"\x00" * 5, af.PCM_F32LE)
    assert info.value.code == "invalid_audio"


def test_pcm16_passes_through_and_needs_whole_samples() -> None:
    assert af.decode(b"\x01\x02", af.PCM16) == af.Pcm(b"\x01\x02", 0)
    with pytest.raises(af.AudioDecodeError):
        af.decode(b"\x01", af.PCM16)


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


# ------------------------------------------------------------------- output
def test_encode_pcm16_output_is_unchanged() -> None:
    pcm = _tone(24000, 30)
    assert af.encode(pcm, 24000, cpb.AudioFormat(encoding="pcm16")) == af.Pcm(pcm, 24000)


@pytest.mark.parametrize(
    ("encoding", "decode"), [("g711_ulaw", af.ulaw_to_pcm16), ("g711_alaw", af.alaw_to_pcm16)]
)
def test_encode_g711_output_resamples_to_8khz_one_byte_per_sample(
    encoding: str, decode: Codec
) -> None:
    pcm = _tone(24000, 300)
    out = af.encode(pcm, 24000, cpb.AudioFormat(encoding=encoding, sample_rate_hz=8000))
    assert out.sample_rate_hz == 8000
    assert len(out.pcm16) == 8 * 300  # one byte per 8 kHz sample
    # Heard as the same tone: correlates with the tone resampled directly.
    heard = np.array(_samples(decode(out.pcm16)), dtype=np.float64)
    t = np.arange(len(heard)) / 8000
    ref = 0.4 * 32768 * np.sin(2 * np.pi * 300.0 * t)
    middle = slice(100, -100)
    assert np.corrcoef(heard[middle], ref[middle])[0, 1] > 0.99
    # Already at 8 kHz: no resampling, only companding.
    at8k = _tone(8000, 100)
    direct = af.encode(at8k, 8000, cpb.AudioFormat(encoding=encoding, sample_rate_hz=8000))
    assert len(direct.pcm16) == len(at8k) // 2


def _delta(pcm: bytes, encoding: str = "", rate: int = 0) -> spb.ServerEvent:
    return spb.ServerEvent(
        audio_delta=spb.AudioDelta(
            pcm16=pcm,
            sample_rate_hz=24000,
            audio_duration_ms=100,
            format=cpb.AudioFormat(encoding=encoding, sample_rate_hz=rate),
        )
    )


def test_each_delta_leaves_in_the_format_the_session_made_it_for() -> None:
    """No per-socket state: a socket that resumed, or a replay that crosses a
    later session.update, encodes each delta by its own `format`."""
    pcm = _tone(24000, 100)
    plain = _delta(pcm, "pcm16", 24000)
    assert af.encode_delta(plain) is None and plain.audio_delta.pcm16 == pcm
    # A delta journaled before deltas named their format: PCM16, as it was made.
    unnamed = _delta(pcm)
    assert af.encode_delta(unnamed) is None and unnamed.audio_delta.pcm16 == pcm
    coded = _delta(pcm, "g711_ulaw", 8000)
    assert af.encode_delta(coded) == "g711_ulaw"
    assert coded.audio_delta.sample_rate_hz == 8000 and len(coded.audio_delta.pcm16) == 800
    assert coded.audio_delta.audio_duration_ms == 100
    alaw = _delta(pcm, "g711_alaw", 8000)
    assert af.encode_delta(alaw) == "g711_alaw"
    assert alaw.audio_delta.pcm16 != coded.audio_delta.pcm16
    # Other events pass untouched, whatever the session's format.
    text = spb.ServerEvent(text_delta=spb.TextDelta(delta="hi"))
    assert af.encode_delta(text) is None


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


def test_the_gateway_and_the_session_agree_on_formats_and_rates() -> None:
    assert af.APPEND_RATES == session_config.INPUT_RATES
    assert af.PCM_RATES == session_config.PCM_INPUT_RATES
    assert af.G711_RATE == session_config.G711_RATE
    assert af.INPUT_ENCODINGS == session_config.INPUT_ENCODINGS
    assert af.OUTPUT_ENCODINGS == session_config.OUTPUT_ENCODINGS
