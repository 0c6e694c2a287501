"""The one audio format table, and PCM16 into an output encoding."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from antiphon.common import audio_formats as formats
from antiphon.common import g711
from antiphon.common.audio import float32_to_pcm16


def _tone(rate: int, ms: int) -> bytes:
    t = np.arange(rate * ms // 1000) / rate
    return float32_to_pcm16(0.4 * np.sin(2 * np.pi * 300.0 * t))


def test_every_rate_a_session_declares_is_one_an_append_may_carry() -> None:
    """Decoded appends may carry G.711's 8 kHz, a session's PCM rate, or a WAV header's."""
    assert set(formats.PCM_INPUT_RATES) <= set(formats.INPUT_RATES)
    assert formats.G711_RATE in formats.INPUT_RATES
    assert {22050, 44100, 48000} <= set(formats.INPUT_RATES)


def test_output_encodings_are_input_encodings_but_float32() -> None:
    assert set(formats.OUTPUT_ENCODINGS) == set(formats.INPUT_ENCODINGS) - {formats.PCM_F32LE}


@pytest.mark.parametrize("encoding", formats.G711)
def test_g711_allows_only_its_own_rate(encoding: str) -> None:
    assert formats.allowed_rates(encoding, formats.PCM_INPUT_RATES) == (8000,)
    assert formats.allowed_rates(formats.PCM16, formats.PCM_INPUT_RATES) == (16000, 24000)


@pytest.mark.parametrize("encoding", [formats.PCM16, ""])
def test_pcm16_output_is_unchanged(encoding: str) -> None:
    pcm = _tone(24000, 30)
    assert formats.encode(pcm, 24000, encoding) == formats.Encoded(pcm, 24000)


@pytest.mark.parametrize(
    ("encoding", "decode"),
    [(formats.G711_ULAW, g711.ulaw_to_pcm16), (formats.G711_ALAW, g711.alaw_to_pcm16)],
)
def test_g711_output_is_resampled_to_8khz_one_byte_per_sample(
    encoding: str, decode: Callable[[bytes], bytes]
) -> None:
    pcm = _tone(24000, 300)
    out = formats.encode(pcm, 24000, encoding)
    assert out.sample_rate_hz == 8000
    assert len(out.audio) == 8 * 300  # one byte per 8 kHz sample
    # Heard as the same tone: correlates with the tone resampled directly.
    heard = np.frombuffer(decode(out.audio), dtype="<i2").astype(np.float64)
    t = np.arange(len(heard)) / 8000
    ref = 0.4 * 32768 * np.sin(2 * np.pi * 300.0 * t)
    middle = slice(100, -100)
    assert np.corrcoef(heard[middle], ref[middle])[0, 1] > 0.99
    # Already at 8 kHz: no resampling, only companding.
    at8k = _tone(8000, 100)
    direct = formats.encode(at8k, 8000, encoding)
    assert direct == formats.Encoded(
        g711.pcm16_to_ulaw(at8k) if encoding == formats.G711_ULAW else g711.pcm16_to_alaw(at8k),
        8000,
    )
