"""Client audio at the edge: decoding each encoding to PCM16 (G.711, float32, WAV)
and the GA format objects the session is echoed with."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from antiphon.common import audio_formats as formats
from antiphon.common import g711
from antiphon.common.audio import float32_to_pcm16
from antiphon.gateway.translate import audio_formats as af
from antiphon.gateway.translate.translator import Translator
from antiphon.v1 import common_pb2 as cpb
from tests.gateway import client_events as client


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
    assert af.wav_to_pcm16(client.wav(pcm, 16000)) == af.Pcm(pcm, 16000)


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


# ------------------------------------------- client events, through the translator
@pytest.mark.parametrize("rate", [16000, 24000])
def test_pcm_f32le_append_is_clipped_to_pcm16(rate: int) -> None:
    samples = np.array([0.0, 0.5, -0.5, 1.5, -2.0, np.nan], dtype="<f4")
    cmd = Translator().translate(
        client.append(samples.tobytes(), format="pcm_f32le", sample_rate_hz=rate)
    )
    got = np.frombuffer(cmd.append_audio.pcm16, dtype="<i2").tolist()
    assert got == [0, 16384, -16384, 32767, -32768, 0]
    assert cmd.append_audio.sample_rate_hz == rate


def test_pcm_f32le_session_reads_appends_as_float() -> None:
    t = Translator()
    t.translate(client.update({"input_audio_format": "pcm_f32le", "sample_rate_hz": 16000}))
    floats = np.full(160, 0.25, dtype="<f4").tobytes()
    append = t.translate(client.append(floats)).append_audio
    assert append.pcm16 == float32_to_pcm16(np.full(160, 0.25))
    assert append.sample_rate_hz == 0  # the session's (16 kHz) rate, resampled there


@pytest.mark.parametrize(
    ("session", "encoding"),
    [
        ({"input_audio_format": "g711_ulaw"}, "g711_ulaw"),
        ({"input_audio_format": "g711_alaw"}, "g711_alaw"),
        ({"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}, "g711_ulaw"),
        ({"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcma"}}}}, "g711_alaw"),
    ],
)
def test_g711_session_input_is_8khz_and_appends_decode_from_it(
    session: dict[str, Any], encoding: str
) -> None:
    t = Translator()
    patch = t.translate(client.update(session)).update.config
    assert patch.input_audio_format == cpb.AudioFormat(encoding=encoding, sample_rate_hz=8000)
    pcm = client.sine(8000, 400)
    coded = g711.pcm16_to_ulaw(pcm) if encoding == "g711_ulaw" else g711.pcm16_to_alaw(pcm)
    append = t.translate(client.append(coded)).append_audio
    decoded = af.decode(coded, encoding).pcm16
    assert (append.pcm16, append.sample_rate_hz) == (decoded, 8000)
    # A later update without a format keeps the declared encoding.
    t.translate(client.update({"instructions": "x"}))
    assert t.translate(client.append(coded)).append_audio.pcm16 == decoded
    # And back to PCM16: raw bytes again.
    t.translate(client.update({"input_audio_format": "pcm16"}))
    assert t.translate(client.append(pcm)).append_audio.pcm16 == pcm


@pytest.mark.parametrize(
    ("session", "encoding"),
    [
        ({"output_audio_format": "g711_ulaw"}, "g711_ulaw"),
        ({"audio": {"output": {"format": {"type": "audio/pcma"}}}}, "g711_alaw"),
    ],
)
def test_g711_session_output_is_8khz(session: dict[str, Any], encoding: str) -> None:
    patch = client.patch(session)
    assert patch.output_audio_format == cpb.AudioFormat(encoding=encoding, sample_rate_hz=8000)


@pytest.mark.parametrize(
    ("fmt", "encode"),
    [
        ("g711_ulaw", g711.pcm16_to_ulaw),
        ("g711_alaw", g711.pcm16_to_alaw),
        ({"type": "audio/pcmu"}, g711.pcm16_to_ulaw),
        ({"type": "audio/pcma", "rate": 8000}, g711.pcm16_to_alaw),
    ],
)
def test_per_event_g711_format_overrides_the_session(fmt: Any, encode: Any) -> None:
    pcm = client.sine(8000, 240)
    append = Translator().translate(client.append(encode(pcm), format=fmt)).append_audio
    assert append.sample_rate_hz == 8000
    assert len(append.pcm16) == len(pcm)


def test_per_event_format_also_reads_input_audio_format() -> None:
    floats = np.zeros(10, dtype="<f4").tobytes()
    append = (
        Translator().translate(client.append(floats, input_audio_format="pcm_f32le")).append_audio
    )
    assert append.pcm16 == b"\x00\x00" * 10


@pytest.mark.parametrize("etype", ["push_chunk", "input.audio.append"])
@pytest.mark.parametrize("rate", [8000, 16000, 44100])
def test_legacy_aliases_default_to_wav_and_take_its_rate(etype: str, rate: int) -> None:
    pcm = client.sine(rate, rate // 10)
    cmd = Translator().translate({"type": etype, "audio": client.b64(client.wav(pcm, rate))})
    assert (cmd.append_audio.pcm16, cmd.append_audio.sample_rate_hz) == (pcm, rate)


def test_legacy_alias_with_a_format_is_not_wav() -> None:
    pcm = client.sine(16000, 160)
    cmd = Translator().translate(
        {"type": "push_chunk", "chunk": client.b64(pcm), "format": "pcm16"}
    )
    assert cmd.append_audio.pcm16 == pcm


def test_canonical_append_takes_wav_when_it_says_so() -> None:
    pcm = client.sine(22050, 2205)
    append = (
        Translator().translate(client.append(client.wav(pcm, 22050), format="wav")).append_audio
    )
    assert (append.pcm16, append.sample_rate_hz) == (pcm, 22050)
    same = Translator().translate(
        client.append(client.wav(pcm, 22050), format="wav", sample_rate_hz=22050)
    )
    assert same.append_audio.sample_rate_hz == 22050


@pytest.mark.parametrize(
    ("extra", "code", "param"),
    [
        ({"format": "opus"}, "unsupported_audio_format", "format"),
        ({"format": {"type": "audio/aac"}}, "unsupported_audio_format", "format"),
        ({"format": 16}, "invalid_value", "format"),
        ({"format": {"type": "audio/pcm", "rate": "x"}}, "invalid_value", "format.rate"),
        (
            {"format": {"type": "audio/pcm", "rate": 8000}},
            "unsupported_audio_format",
            "format.rate",
        ),
        (
            {"format": "g711_ulaw", "sample_rate_hz": 16000},
            "unsupported_audio_format",
            "sample_rate_hz",
        ),
        (
            {"format": "pcm_f32le", "sample_rate_hz": 8000},
            "unsupported_audio_format",
            "sample_rate_hz",
        ),
        (
            {"format": {"type": "audio/pcm", "rate": 16000}, "sample_rate_hz": 24000},
            "invalid_value",
            "sample_rate_hz",
        ),
        ({"format": "pcm_f32le"}, "invalid_audio", "audio"),  # 6 bytes: not whole floats
        ({"format": "wav"}, "invalid_audio", "audio"),  # no RIFF header
    ],
)
def test_bad_per_event_formats_are_refused(extra: dict[str, Any], code: str, param: str) -> None:
    err = client.refused(client.append(b"\x00" * 6, **extra))
    assert (err.code, err.param) == (code, param)


@pytest.mark.parametrize(
    ("wav_bytes", "code"),
    [
        (client.wav(b"\x00\x00" * 8, 16000, channels=2), "unsupported_audio_format"),
        (client.wav(b"\x00\x00" * 8, 12345), "unsupported_audio_format"),
        (b"RIFF\x00\x00\x00\x00WAVE", "invalid_audio"),
        (b"RIFF\x00\x00\x00\x00WAVEdata\x02\x00\x00\x00\x00\x00", "invalid_audio"),
    ],
)
def test_bad_wav_is_refused(wav_bytes: bytes, code: str) -> None:
    err = client.refused({"type": "push_chunk", "chunk": client.b64(wav_bytes)})
    assert (err.code, err.param) == (code, "audio")


def test_legacy_raw_pcm_without_format_is_refused_as_not_wav() -> None:
    err = client.refused({"type": "push_chunk", "chunk": client.b64(b"\x02\x00" * 4)})
    assert (err.code, err.param) == ("invalid_audio", "audio")
