"""The user's first pause in an utterance, heard before the turn detector decides.

A session that answers preemptively is told, once the silence after speech
has lasted `after_ms`, what the user has said so far (`UtterancePause`), so
its answer can start while the turn detector still waits; if speech resumes
in that utterance, it is told that too (`SpeechResumed`), and the answer is
dropped. If the turn ends in that same silence, the pause's text is the
turn's transcript: the ASR pass is already done.

One pause at a time: a second silence in the same utterance starts a new
one only after speech resumed from the first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from antiphon.stage0.backends.cascade.asr.transcript import PendingText
from antiphon.stage0.backends.cascade.listening.vad import Endpointer, SpeechStopped


@dataclass(eq=False)
class Pause:
    """A silence inside an utterance, and the text of the utterance up to it."""

    silence_start_ms: int
    # Where the audio transcribed ends (the silence had lasted `after_ms` by then).
    audio_end_ms: int
    text: asyncio.Task[str] = field(init=False)
    reported: bool = False


class Pauses:
    def __init__(
        self,
        *,
        after_ms: int,
        text_until: Callable[[int], PendingText],
        report: Callable[[Pause, str], None],
        resumed: Callable[[int], None],
        count: Callable[[str], None],
    ) -> None:
        # 0: pauses are never watched for.
        self._after_ms = after_ms
        self._text_until = text_until
        self._report = report
        self._resumed = resumed
        self._count = count
        self.enabled = False
        self._pause: Pause | None = None

    def watch(self, endpointer: Endpointer) -> None:
        """After the VAD ran: a pause starts, or the one heard is over (speech resumed)."""
        silence = endpointer.silence_start_ms
        pause = self._pause
        if pause is not None and silence != pause.silence_start_ms:
            self._pause = None
            pause.text.cancel()
            if pause.reported and endpointer.in_speech:
                self._count("resumed")
                self._resumed(endpointer.now_ms)
            pause = None
        if (
            pause is None
            and silence is not None
            and self.enabled
            and self._after_ms > 0
            and endpointer.now_ms - silence >= self._after_ms
        ):
            self._pause = Pause(silence_start_ms=silence, audio_end_ms=endpointer.now_ms)
            self._pause.text = asyncio.create_task(self._heard(self._pause))

    async def _heard(self, pause: Pause) -> str:
        text = await self._text_until(pause.audio_end_ms)
        # Reported only while still the pause being heard: after the turn ended
        # in it, the text is the transcript's and the pause is news to nobody.
        if self._pause is pause:
            pause.reported = True
            self._count("reported")
            self._report(pause, text)
        return text

    def claim(self, stopped: SpeechStopped) -> PendingText | None:
        """The turn ended: its text, if it ended in the pause heard (no speech after it)."""
        pause, self._pause = self._pause, None
        if pause is None:
            return None
        if stopped.offset_ms != pause.silence_start_ms:
            pause.text.cancel()
            return None
        self._count("ended")
        return _awaited(pause.text)

    def drop(self) -> None:
        """The utterance was cleared or the session closed."""
        pause, self._pause = self._pause, None
        if pause is not None:
            pause.text.cancel()


async def _awaited(task: asyncio.Task[str]) -> str:
    return await task
