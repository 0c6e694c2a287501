"""FrameResampler: one fixed frame out per frame in, at any rate, the stream
continuous apart from the filter's delay at its start."""

from __future__ import annotations

import numpy as np
import pytest

from antiphon.common.audio import StreamResampler, bytes_for_ms, float32_to_pcm16
from antiphon.stage1.frames.resampler import FrameResampler, lead_bytes


def tone(frames: int, rate: int = 24000, samples: int = 1920) -> list[bytes]:
    t = np.arange(frames * samples) / rate
    pcm = float32_to_pcm16(0.3 * np.sin(2 * np.pi * 440 * t))
    return [pcm[i * samples * 2 : (i + 1) * samples * 2] for i in range(frames)]


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
def test_every_frame_comes_out_80_ms_long(rate: int) -> None:
    frames = FrameResampler(24000, rate, 80)
    sizes = {len(frames.process(chunk)) for chunk in tone(40)}
    assert sizes == {rate * 80 // 1000 * 2}


@pytest.mark.parametrize("rate", [8000, 16000, 44100, 48000])
def test_the_stream_is_the_resampled_input_behind_some_silence(rate: int) -> None:
    """Cut into frames, the output is the plain streamed resampling, delayed
    once at its start: never a gap in the middle (a click)."""
    chunks = tone(600)
    frames = FrameResampler(24000, rate, 80)
    framed = b"".join(frames.process(c) for c in chunks)
    stream = StreamResampler(24000, rate)
    plain = b"".join(stream.process(c) for c in chunks)
    lead = lead_bytes(24000, rate, 80)
    # Under a frame: the price of fixed 80 ms chunks at another rate.
    assert 0 < lead < bytes_for_ms(80, rate)
    assert framed == bytes(lead) + plain[: len(framed) - lead]


def test_at_its_own_rate_a_frame_passes_through() -> None:
    (chunk,) = tone(1)
    assert FrameResampler(24000, 24000, 80).process(chunk) == chunk
