"""PCM16 helpers: conversions, durations, one-shot and streamed resampling."""

from __future__ import annotations

import numpy as np
import pytest

from antiphon.common.audio import (
    StreamResampler,
    bytes_for_ms,
    check_pcm16,
    duration_ms,
    float32_to_pcm16,
    pcm16_to_float32,
    resample_pcm16,
)


def _sine(freq: float, rate: int, seconds: float, amp: float = 0.5) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    return float32_to_pcm16(amp * np.sin(2 * np.pi * freq * t))


def _peak_hz(pcm16: bytes, rate: int) -> float:
    x = pcm16_to_float32(pcm16)
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[int(np.argmax(spectrum))])


def _chunked(resampler: StreamResampler, pcm16: bytes, chunk_bytes: int) -> bytes:
    out = [resampler.process(pcm16[i : i + chunk_bytes]) for i in range(0, len(pcm16), chunk_bytes)]
    return b"".join(out) + resampler.flush()


@pytest.mark.parametrize("num_bytes", [1, 3, 4801])
def test_odd_byte_count_raises(num_bytes: int) -> None:
    data = b"\x00" * num_bytes
    with pytest.raises(ValueError):
        check_pcm16(data)
    with pytest.raises(ValueError):
        pcm16_to_float32(data)
    with pytest.raises(ValueError):
        resample_pcm16(data, 22050, 24000)
    with pytest.raises(ValueError):
        StreamResampler(22050, 24000).process(data)
    with pytest.raises(ValueError):
        StreamResampler(16000, 16000).process(data)


def test_float_round_trip_is_exact() -> None:
    ints = np.array([-32768, -1, 0, 1, 12345, 32767], dtype="<i2").tobytes()
    assert float32_to_pcm16(pcm16_to_float32(ints)) == ints


def test_float32_to_pcm16_clips_and_silences_nan() -> None:
    out = np.frombuffer(float32_to_pcm16(np.array([2.0, -2.0, np.nan, 1.0])), dtype="<i2")
    assert out.tolist() == [32767, -32768, 0, 32767]


def test_durations() -> None:
    assert duration_ms(48000, 24000) == 1000
    assert duration_ms(2 * 441, 22050) == 20
    assert duration_ms(0, 16000) == 0
    assert bytes_for_ms(100, 16000) == 3200
    assert duration_ms(bytes_for_ms(250, 24000), 24000) == 250
    with pytest.raises(ValueError):
        duration_ms(10, 0)


def test_equal_rates_pass_through() -> None:
    pcm = _sine(440, 16000, 0.1)
    resampler = StreamResampler(16000, 16000)
    assert resampler.passthrough
    assert resampler.process(pcm) == pcm
    assert resampler.flush() == b""
    assert resample_pcm16(pcm, 16000, 16000) == pcm


@pytest.mark.parametrize(
    ("in_rate", "out_rate"), [(22050, 24000), (24000, 16000), (16000, 24000), (48000, 16000)]
)
def test_one_shot_preserves_frequency_and_length(in_rate: int, out_rate: int) -> None:
    pcm = _sine(440, in_rate, 1.0)
    out = resample_pcm16(pcm, in_rate, out_rate)
    assert abs(len(out) // 2 - out_rate) <= 2
    assert abs(_peak_hz(out, out_rate) - 440) < 2


@pytest.mark.parametrize("chunk_ms", [5, 20, 97])
@pytest.mark.parametrize(("in_rate", "out_rate"), [(22050, 24000), (24000, 16000)])
def test_stream_matches_one_shot(chunk_ms: int, in_rate: int, out_rate: int) -> None:
    pcm = _sine(1000, in_rate, 0.75)
    one_shot = resample_pcm16(pcm, in_rate, out_rate)
    streamed = _chunked(StreamResampler(in_rate, out_rate), pcm, bytes_for_ms(chunk_ms, in_rate))
    assert abs(len(streamed) - len(one_shot)) // 2 <= 4
    assert abs(_peak_hz(streamed, out_rate) - 1000) < 3
    # Away from the edges the stream is the same signal, not just the same length.
    a = pcm16_to_float32(streamed)[500:-500]
    b = pcm16_to_float32(one_shot)[500 : 500 + len(a)]
    assert np.max(np.abs(a - b)) < 0.01


def test_stream_has_no_seams() -> None:
    # A click at a chunk boundary would show as a large sample-to-sample jump.
    rate_in, rate_out = 22050, 24000
    pcm = _sine(300, rate_in, 0.5, amp=0.8)
    out = pcm16_to_float32(_chunked(StreamResampler(rate_in, rate_out), pcm, 2 * 441))
    max_step = 0.8 * 2 * np.pi * 300 / rate_out
    assert np.max(np.abs(np.diff(out))) < 1.2 * max_step


def test_flush_resets_for_next_stream() -> None:
    resampler = StreamResampler(22050, 24000)
    pcm = _sine(440, 22050, 0.2)
    first = _chunked(resampler, pcm, 882)
    second = _chunked(resampler, pcm, 882)
    assert first == second
