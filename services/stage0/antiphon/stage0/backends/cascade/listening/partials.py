"""Partial transcripts of the utterance being spoken.

While the user speaks, the utterance so far is transcribed again every
`every_ms` of audio. Whisper may still change its mind about the last words
of a growing utterance, so only the words two passes in a row agree on are
reported (local agreement): what is reported is never taken back, and each
report extends the one before. The session turns the growth into OpenAI's
`conversation.item.input_audio_transcription.delta`.

One pass at a time per session, and none while the user is silent: a pause
has its own pass (pauses.py), which a partial one must not delay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from antiphon.stage0.backends.cascade.asr.transcript import PendingText
from antiphon.stage0.backends.cascade.listening.vad import Endpointer


def agreed(previous: list[str], current: list[str]) -> list[str]:
    """The words both passes begin with."""
    n = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        n += 1
    return current[:n]


class Partials:
    def __init__(
        self,
        *,
        every_ms: int,
        text_until: Callable[[int], PendingText],
        report: Callable[[str], None],
        count: Callable[[], None],
    ) -> None:
        # 0: no partial transcripts (only the turn's final one).
        self._every_ms = every_ms
        self._text_until = text_until
        self._report = report
        self._count = count
        self.enabled = False
        self._pass: asyncio.Task[None] | None = None
        # When the last pass was due (None: the utterance has had none yet).
        self._last_pass_ms: int | None = None
        self._previous: list[str] = []
        self._stable: list[str] = []

    def watch(self, endpointer: Endpointer) -> None:
        """After the VAD ran: a pass is due once `every_ms` more speech was heard."""
        if not self.enabled or self._every_ms <= 0 or not endpointer.in_speech:
            return
        if endpointer.silence_start_ms is not None:
            return  # a pause: its own pass runs, if any
        if self._pass is not None and not self._pass.done():
            return
        now = endpointer.now_ms
        if self._last_pass_ms is None:
            self._last_pass_ms = now  # the utterance's first speech: a pass is due later
            return
        if now - self._last_pass_ms < self._every_ms:
            return
        self._last_pass_ms = now
        self._pass = asyncio.create_task(self._transcribe(now))

    async def _transcribe(self, end_ms: int) -> None:
        words = (await self._text_until(end_ms)).split()
        stable = agreed(self._previous, words)
        self._previous = words
        if len(stable) > len(self._stable) and stable[: len(self._stable)] == self._stable:
            self._stable = stable
            self._count()
            self._report(" ".join(stable))

    def reset(self) -> None:
        """The utterance ended or was cleared: the next one starts afresh."""
        if self._pass is not None:
            self._pass.cancel()
        self._pass = None
        self._last_pass_ms = None
        self._previous, self._stable = [], []
