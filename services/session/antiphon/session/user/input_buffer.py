"""The user's uncommitted audio, as this session counts it.

The audio itself lives on stage0; the session keeps how much is waiting
(for its limit, and to know a commit has something to seal) and the
resampler that turns the client's rate into the rate stage0's backend hears
(16 kHz for the cascade, 24 kHz for Mimi: the worker says which). Resampling
happens here, once, in mailbox order: an append right after a
`session.update` is read at the rate that update made effective.
"""

from __future__ import annotations

from antiphon.common import audio_formats, stage_audio
from antiphon.common.audio import StreamResampler
from antiphon.session.actor.errors import Rejection, invalid


def to_stage0(pcm16: bytes, rate: int, stage_rate: int) -> bytes:
    """A whole buffer (an audio item's content) at stage0's rate."""
    resampler = StreamResampler(rate, stage_rate)
    return resampler.process(pcm16) + resampler.flush()


class InputBuffer:
    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        # Bytes at stage0's rate sent since the last commit or clear.
        self.pending_bytes = 0
        self._stage_rate = stage_audio.RATE
        self._resampler: StreamResampler | None = None

    @property
    def empty(self) -> bool:
        return self.pending_bytes == 0

    @property
    def pending_ms(self) -> int:
        return self.pending_bytes * 1000 // (2 * self._stage_rate)

    def accept(self, pcm16: bytes, rate: int, stage_rate: int, *, bounded: bool = True) -> bytes:
        """Take one append at `rate`; returns it at `stage_rate` (maybe empty:
        the filter holds a few ms). Raises `Rejection` past the limit (unless
        not `bounded`: a model-native backend hears the audio as it comes and
        holds none of it for a commit) or for a rate no client may send."""
        if bounded and self.pending_bytes >= self._limit:
            raise Rejection(
                "rate_limit_error",
                "input_buffer_full",
                "pending input exceeds max_pending_input_bytes_per_session "
                f"({self._limit}); commit or clear it",
            )
        if rate not in audio_formats.INPUT_RATES:
            raise invalid(
                "unsupported_audio_format",
                f"sample_rate_hz must be one of {audio_formats.INPUT_RATES}",
                "sample_rate_hz",
            )
        if (
            self._resampler is None
            or self._resampler.in_rate != rate
            or self._stage_rate != stage_rate
        ):
            self._resampler = StreamResampler(rate, stage_rate)
            self._stage_rate = stage_rate
        pcm = self._resampler.process(pcm16)
        self.pending_bytes += len(pcm)
        return pcm

    def flush(self) -> bytes:
        """The turn is sealed: the last few ms the resampler's filter still holds."""
        return self._resampler.flush() if self._resampler is not None else b""

    def clear(self) -> None:
        """Committed or cleared: nothing waits any more."""
        self.pending_bytes = 0

    def reset(self) -> None:
        """Detached: the next stream starts with a fresh resampler."""
        self.pending_bytes = 0
        self._resampler = None
