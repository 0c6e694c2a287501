"""PCM16 helpers shared by the gateway and the stage workers.

Audio travels between tiers as raw little-endian signed 16-bit mono PCM.
This module stays free of model code (the gateway imports it), and imports
`soxr` only when a resampler is built, so a tier that never resamples does
not need it installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import soxr

BYTES_PER_SAMPLE = 2
# soxr "HQ" streams 22.05 -> 24 kHz for about 2 ms of CPU per second of
# audio here: negligible next to TTS/ASR, so there is no reason to go lower.
DEFAULT_QUALITY = "HQ"
# Wire order is little-endian whatever the host is.
_WIRE_DTYPE = np.dtype("<i2")


def check_pcm16(pcm16: bytes | bytearray | memoryview) -> None:
    """Raise ValueError unless `pcm16` holds a whole number of 16-bit samples."""
    if len(pcm16) % BYTES_PER_SAMPLE:
        raise ValueError(f"PCM16 needs an even number of bytes, got {len(pcm16)}")


def _check_rate(rate: int) -> None:
    if rate <= 0:
        raise ValueError(f"sample rate must be positive, got {rate}")


def pcm16_to_int16(pcm16: bytes | bytearray | memoryview) -> npt.NDArray[np.int16]:
    """Wire bytes to native-order int16 samples (a view when the host is little-endian)."""
    check_pcm16(pcm16)
    return np.frombuffer(pcm16, dtype=_WIRE_DTYPE).astype(np.int16, copy=False)


def int16_to_pcm16(samples: npt.NDArray[np.int16]) -> bytes:
    """Native int16 samples to wire bytes."""
    return samples.astype(_WIRE_DTYPE, copy=False).tobytes()


def pcm16_to_float32(pcm16: bytes | bytearray | memoryview) -> npt.NDArray[np.float32]:
    """Wire bytes to float32 samples in [-1, 1)."""
    return pcm16_to_int16(pcm16).astype(np.float32) / np.float32(32768.0)


def float32_to_pcm16(samples: npt.ArrayLike) -> bytes:
    """Float samples (nominally [-1, 1]) to wire bytes, clipped rather than wrapped.

    Scaling by 32768 makes this the exact inverse of `pcm16_to_float32`; NaN
    becomes silence so one bad model output cannot turn into a full-scale click.
    """
    x = np.nan_to_num(np.asarray(samples, dtype=np.float32), nan=0.0, posinf=1.0, neginf=-1.0)
    scaled = np.clip(np.rint(x * np.float32(32768.0)), -32768, 32767)
    return int16_to_pcm16(scaled.astype(np.int16))


def num_samples(num_bytes: int) -> int:
    return num_bytes // BYTES_PER_SAMPLE


def duration_ms(num_bytes: int, rate: int) -> int:
    """Whole milliseconds of audio in `num_bytes` of PCM16 at `rate` (rounded down)."""
    _check_rate(rate)
    return num_samples(num_bytes) * 1000 // rate


def bytes_for_ms(ms: int, rate: int) -> int:
    """PCM16 byte count of `ms` milliseconds at `rate` (rounded down to a whole sample)."""
    _check_rate(rate)
    return ms * rate // 1000 * BYTES_PER_SAMPLE


def resample_pcm16(
    pcm16: bytes, in_rate: int, out_rate: int, *, quality: str = DEFAULT_QUALITY
) -> bytes:
    """Resample a whole buffer at once (no state carried to a next call)."""
    check_pcm16(pcm16)
    _check_rate(in_rate)
    _check_rate(out_rate)
    if in_rate == out_rate or not pcm16:
        return bytes(pcm16)
    import soxr

    out = soxr.resample(pcm16_to_float32(pcm16), in_rate, out_rate, quality=quality)
    return float32_to_pcm16(out)


class StreamResampler:
    """Resamples a PCM16 stream chunk by chunk, keeping filter state across chunks.

    Chunk boundaries leave no clicks or gaps, unlike resampling each chunk on
    its own. The filter delays output by a few milliseconds; `flush()` drains
    it at the end of a stream and makes the resampler ready for the next one.
    """

    def __init__(self, in_rate: int, out_rate: int, *, quality: str = DEFAULT_QUALITY) -> None:
        _check_rate(in_rate)
        _check_rate(out_rate)
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._quality = quality
        self._stream: soxr.ResampleStream | None = None
        if in_rate != out_rate:
            self._stream = self._new_stream()

    @property
    def passthrough(self) -> bool:
        return self._stream is None

    def _new_stream(self) -> soxr.ResampleStream:
        import soxr

        # float32, not int16: soxr dithers its int16 output, so the same input
        # chunked differently (or streamed twice) would not give the same bytes.
        return soxr.ResampleStream(
            self.in_rate, self.out_rate, 1, dtype="float32", quality=self._quality
        )

    def process(self, pcm16: bytes) -> bytes:
        """Feed one chunk; returns whatever output the filter has ready (may be empty)."""
        check_pcm16(pcm16)
        if self._stream is None:
            return bytes(pcm16)
        if not pcm16:
            return b""
        return float32_to_pcm16(self._stream.resample_chunk(pcm16_to_float32(pcm16)))

    def flush(self) -> bytes:
        """End the stream: return the filter's tail and reset for a new stream."""
        if self._stream is None:
            return b""
        out = self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        # A soxr stream refuses input after `last=True`; a fresh one is cheap.
        self._stream = self._new_stream()
        return float32_to_pcm16(out)
