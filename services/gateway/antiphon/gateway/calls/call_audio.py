"""A WebRTC call's audio: the caller's microphone in, the answer out.

aiortc decodes the caller's Opus into 48 kHz frames and encodes whatever a
track gives it; the session hears and speaks PCM16 mono at 24 kHz, as a
WebSocket client's default. `Microphone` turns the caller's track into the
appends a WebSocket client would send (`append_ms` each: what arrived since
the last, so the session's VAD sees the speech within that time), and
`Speaker` is the answer's track: 20 ms frames on the wall clock, silence
when there is nothing to say, and `clear` drops what was not yet played (a
barge-in). Resampling is PyAV's (aiortc's own dependency), stateful across
a stream's pieces.
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections.abc import AsyncIterator, Callable

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

SESSION_RATE = 24000
WIRE_RATE = 48000  # Opus in WebRTC
FRAME_S = 0.020
_FRAME_SAMPLES = int(WIRE_RATE * FRAME_S)
_FRAME_BYTES = _FRAME_SAMPLES * 2


def _pcm16(frames: list[av.AudioFrame]) -> bytes:
    return b"".join(f.to_ndarray().astype("<i2").tobytes() for f in frames)


class Microphone:
    """The caller's audio track as PCM16 mono at the session's rate."""

    def __init__(self, track: MediaStreamTrack, *, append_ms: int = 100) -> None:
        self._track = track
        self._append_bytes = SESSION_RATE * append_ms // 1000 * 2
        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=SESSION_RATE)

    async def appends(self, *, silent_after_s: float) -> AsyncIterator[bytes]:
        """Pieces of `append_ms`, until the track ends; `TimeoutError` when no
        audio came for `silent_after_s` (a call whose media stopped)."""
        pending = bytearray()
        while True:
            try:
                frame = await asyncio.wait_for(self._track.recv(), silent_after_s)
            except MediaStreamError:
                break
            if not isinstance(frame, av.AudioFrame):
                continue  # an audio track gives audio frames; nothing else is heard
            pending += _pcm16(self._resampler.resample(frame))
            if len(pending) >= self._append_bytes:
                yield bytes(pending)
                pending.clear()
        if pending:
            yield bytes(pending)


class Speaker(MediaStreamTrack):
    """The answer's audio track: what `play` was given, in 20 ms frames at
    the pace of the wall clock; `on_drained` once the last of it was sent."""

    kind = "audio"

    def __init__(self, on_drained: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self._pending = bytearray()  # PCM16 mono at WIRE_RATE
        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=WIRE_RATE)
        self._on_drained = on_drained
        self._start: float | None = None
        self._sent = 0  # samples

    @property
    def playing(self) -> bool:
        return bool(self._pending)

    def play(self, pcm16: bytes, rate: int = SESSION_RATE) -> None:
        samples = np.frombuffer(pcm16[: len(pcm16) // 2 * 2], "<i2")
        if not samples.size:
            return
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="s16", layout="mono")
        frame.sample_rate = rate
        self._pending += _pcm16(self._resampler.resample(frame))

    def clear(self) -> float:
        """Drop what was not played yet; the seconds dropped."""
        dropped = len(self._pending) / 2 / WIRE_RATE
        self._pending.clear()
        return dropped

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        else:
            wait = self._start + self._sent / WIRE_RATE - now
            if wait > 0:
                await asyncio.sleep(wait)
        had = bool(self._pending)
        chunk = bytes(self._pending[:_FRAME_BYTES])
        del self._pending[:_FRAME_BYTES]
        if had and not self._pending:
            self._on_drained()
        frame = av.AudioFrame(format="s16", layout="mono", samples=_FRAME_SAMPLES)
        frame.planes[0].update(chunk.ljust(frame.planes[0].buffer_size, b"\0"))
        frame.pts = self._sent
        frame.sample_rate = WIRE_RATE
        frame.time_base = fractions.Fraction(1, WIRE_RATE)
        self._sent += _FRAME_SAMPLES
        return frame
