"""Incremental transcription of one utterance while it is being spoken.

Whisper is not a streaming model, but its cost grows with the audio it is
given. So once enough audio is waiting, its last pause becomes a cut, and
the piece before it is transcribed in the background while the user goes
on speaking. When the utterance ends, only the tail since the last cut is
left to transcribe.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from antiphon.common import stage_audio

BYTES_PER_MS = stage_audio.BYTES_PER_MS
# A cut goes in a pause: a stretch of this length whose energy is a small
# fraction of the speech around it. Long enough to be a gap between words,
# not the hush of a single consonant.
WINDOW_MS = 80
STEP_MS = 10
PAUSE_RATIO = 0.05
# No piece shorter than this: Whisper needs some audio to hear a phrase. A
# last word alone is often heard as nothing (measured), so a shorter tail is
# transcribed together with the piece before it.
MIN_PIECE_MS = 1500

Transcriber = Callable[[bytes], Coroutine[Any, Any, str]]
# An utterance's text, once the last of it is transcribed; `close()` it to drop it.
PendingText = Coroutine[Any, Any, str]


def pause_cut(pcm16: bytes, *, force: bool = False) -> int | None:
    """Byte offset of the middle of the last pause in `pcm16`, if there is one.

    With `force`, the quietest stretch is taken when there is no pause, so an
    utterance with no breath in it still gets cut.
    """
    steps = len(pcm16) // (STEP_MS * BYTES_PER_MS)
    per_window = WINDOW_MS // STEP_MS
    first = MIN_PIECE_MS // STEP_MS
    if steps - per_window <= first:
        return None
    samples = np.frombuffer(pcm16[: steps * STEP_MS * BYTES_PER_MS], dtype="<i2")
    energy = np.square(samples.astype(np.float32)).reshape(steps, -1).mean(axis=1)
    windows = np.convolve(energy, np.ones(per_window) / per_window, mode="valid")
    # The last window touches the newest audio, which may be a pause that has
    # not ended yet: cut before it, where the next word cannot be cut in half.
    candidates = windows[first:-1]
    quiet = np.nonzero(candidates <= PAUSE_RATIO * float(np.median(windows)))[0]
    if len(quiet):
        best = int(quiet[-1])
    elif force:
        best = int(np.argmin(candidates))
    else:
        return None
    return ((first + best) * STEP_MS + WINDOW_MS // 2) * BYTES_PER_MS


@dataclass
class _Piece:
    audio: bytes
    task: asyncio.Task[str]


class StreamingTranscript:
    """The pieces of the current utterance, transcribed or in flight.

    Cuts are kept on the session's stream clock (milliseconds of audio
    received), so audio the caller trims off the front of its buffer does not
    shift them.
    """

    def __init__(self, transcribe: Transcriber, *, segment_ms: int) -> None:
        self._transcribe = transcribe
        # 0 turns segmenting off: every utterance is transcribed whole at its end.
        self._segment_ms = segment_ms
        self._cut_ms = 0
        self._pieces: list[_Piece] = []

    def update(self, utterance: bytes | bytearray, start_ms: int) -> None:
        """The utterance buffer grew: start a piece if enough audio waits and none is running.

        A piece ends at the last pause in the waiting audio; past twice the
        segment length without a pause, at its quietest point.
        """
        if not self._segment_ms or (self._pieces and not self._pieces[-1].task.done()):
            return
        pending = self._since_cut(utterance, start_ms)
        waiting_ms = len(pending) // BYTES_PER_MS
        if waiting_ms < self._segment_ms:
            return
        cut = pause_cut(pending, force=waiting_ms >= 2 * self._segment_ms)
        if cut is None:
            return
        end_ms = start_ms + len(utterance) // BYTES_PER_MS
        self._cut_ms = end_ms - (len(pending) - cut) // BYTES_PER_MS
        audio = pending[:cut]
        self._pieces.append(_Piece(audio, asyncio.create_task(self._transcribe(audio))))

    def take(self, utterance: bytes, start_ms: int) -> PendingText:
        """The utterance ended: its whole text, once its pieces and tail are transcribed.

        The state moves into the returned awaitable and is cleared at once, so
        the next utterance starts fresh while this one finishes.
        """
        text = self._text(utterance, start_ms, keep=False)
        self._pieces, self._cut_ms = [], 0
        return text

    def peek(self, utterance: bytes, start_ms: int) -> PendingText:
        """The text of the utterance so far, as `take` would give it, leaving the
        pieces in place: the user may go on speaking (a pause, not an end)."""
        return self._text(utterance, start_ms, keep=True)

    def _text(self, utterance: bytes, start_ms: int, *, keep: bool) -> PendingText:
        tail = self._since_cut(utterance, start_ms)
        pieces = list(self._pieces)
        if pieces and len(tail) < MIN_PIECE_MS * BYTES_PER_MS:
            last = pieces.pop()
            if not keep:
                last.task.cancel()
            tail = last.audio + tail

        async def finish() -> str:
            texts = [await asyncio.shield(p.task) for p in pieces]
            texts.append(await self._transcribe(tail) if tail else "")
            return " ".join(t for t in texts if t)

        return finish()

    def reset(self) -> None:
        """The utterance was dropped (input cleared): forget its pieces."""
        for piece in self._pieces:
            piece.task.cancel()
        self._pieces, self._cut_ms = [], 0

    def _since_cut(self, utterance: bytes | bytearray, start_ms: int) -> bytes:
        return bytes(utterance[max(self._cut_ms - start_ms, 0) * BYTES_PER_MS :])
