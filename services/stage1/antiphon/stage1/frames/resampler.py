"""A decoder's fixed frames, resampled to a session's rate as fixed frames again.

A streaming resampler returns whatever its filter has ready: short at first
(its delay), then in uneven blocks (soxr's 24 -> 16 kHz gives 979 or 1468
samples for a 1280-sample frame). A duplex session's chunks are one frame
each, 80 ms long whatever the rate, so the output is cut to exactly a frame.
Silence goes before the stream once, as much as the resampler is ever behind
(measured on silence: the blocks do not depend on the audio), so the cuts
never find it short later: zeros in the middle of speech would click. That
costs some 37 ms of latency at 16 kHz and 73 ms at 8 kHz (soxr "HQ") from
Mimi's 24 kHz; a session at the model's own rate gets the frames as they are.
Any rate in, any rate out: Mimi's 24 kHz, Nemotron's codec's 22,050 Hz.
"""

from __future__ import annotations

import functools

from antiphon.common.audio import StreamResampler, bytes_for_ms

# Frames the lead is measured over (40 s of audio, some 25 ms of work, once
# per rate): how far soxr falls behind still grows for the first few hundred
# frames, then stays (585 samples at 8 and 16 kHz, 1840 at 48 kHz).
_PROBE_FRAMES = 500


class FrameResampler:
    def __init__(self, in_rate: int, out_rate: int, frame_ms: int) -> None:
        self.out_rate = out_rate
        self._stream = StreamResampler(in_rate, out_rate)
        self._frame_in = bytes_for_ms(frame_ms, in_rate)
        self._frame_bytes = bytes_for_ms(frame_ms, out_rate)
        self._ready = bytearray()
        if not self._stream.passthrough:
            self._ready += bytes(lead_bytes(in_rate, out_rate, frame_ms))

    def process(self, pcm16: bytes) -> bytes:
        """One frame in (PCM16 at the input rate), one frame out (at `out_rate`)."""
        if self._stream.passthrough:
            return pcm16
        self._ready += self._stream.process(pcm16)
        short = self._frame_bytes - len(self._ready)
        if short > 0:  # behind by more than measured: rather a gap than a short chunk
            self._ready[:0] = bytes(short)
        frame = bytes(self._ready[: self._frame_bytes])
        del self._ready[: self._frame_bytes]
        return frame


@functools.cache
def lead_bytes(in_rate: int, out_rate: int, frame_ms: int) -> int:
    """The most a stream of whole frames ever falls behind its due output."""
    stream = StreamResampler(in_rate, out_rate)
    silence = bytes(bytes_for_ms(frame_ms, in_rate))
    due = bytes_for_ms(frame_ms, out_rate)
    out = lead = 0
    for frame in range(1, _PROBE_FRAMES + 1):
        out += len(stream.process(silence))
        lead = max(lead, frame * due - out)
    return lead
