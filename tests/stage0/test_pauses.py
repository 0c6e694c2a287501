"""The user's first pause in an utterance (pauses.py), heard on a real
endpointer fed speech probabilities frame by frame, as the cascade runs it:
the VAD's events first (a stop claims the pause), then `watch`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest

from antiphon.stage0.backends.cascade.asr.transcript import PendingText
from antiphon.stage0.backends.cascade.listening.pauses import Pause, Pauses
from antiphon.stage0.backends.cascade.listening.vad import Endpointer, SpeechStopped
from tests.stage0.vad_frames import CONFIG, FRAME, QUIET, SPEECH, frames

AFTER_MS = 120


class Heard:
    """One session's endpointer and pauses, and what the pauses told it."""

    def __init__(self, *, after_ms: int = AFTER_MS, enabled: bool = True) -> None:
        self.endpointer = Endpointer(CONFIG)
        self.asked: list[int] = []  # the ends of the audio transcribed
        self.reports: list[tuple[int, int, str]] = []  # silence start, audio end, text
        self.resumed: list[int] = []
        self.counts: dict[str, int] = {}
        self.claims: list[PendingText | None] = []
        self.cancelled = 0
        # Set: a transcription answers at once; clear: it waits for `release`.
        self.gate = asyncio.Event()
        self.gate.set()
        self.pauses = Pauses(
            after_ms=after_ms,
            text_until=self._text_until,
            report=self._report,
            resumed=self.resumed.append,
            count=lambda outcome: self.counts.update({outcome: self.counts.get(outcome, 0) + 1}),
        )
        self.pauses.enabled = enabled

    async def _text_until(self, end_ms: int) -> str:
        self.asked.append(end_ms)
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return f"said until {end_ms}"

    def _report(self, pause: Pause, text: str) -> None:
        self.reports.append((pause.silence_start_ms, pause.audio_end_ms, text))

    async def hear(self, probabilities: Iterable[float], *, batched: bool = False) -> None:
        """Frame by frame, the pauses watching after each (`batched`: once at
        the end, as after a burst of audio the VAD ran in one go)."""
        for p in probabilities:
            event = self.endpointer.update(p, FRAME)
            if isinstance(event, SpeechStopped):
                self.claims.append(self.pauses.claim(event))
            if not batched:
                self.pauses.watch(self.endpointer)
                await settle()
        if batched:
            self.pauses.watch(self.endpointer)
            await settle()


async def settle() -> None:
    """Let the pause's transcription (a task) run as far as it can."""
    for _ in range(3):
        await asyncio.sleep(0)


async def paused() -> Heard:
    """200 ms of speech, then silence just long enough for a pause."""
    h = Heard()
    await h.hear(frames(200, SPEECH) + frames(AFTER_MS, QUIET))
    return h


async def test_a_pause_is_reported_once_after_its_silence_has_lasted_after_ms() -> None:
    h = Heard()
    await h.hear(frames(200, SPEECH) + frames(AFTER_MS - FRAME, QUIET))
    assert h.asked == [] and h.reports == []  # not before
    await h.hear(frames(FRAME, QUIET))
    # The silence began at 200 ms; the text is of the audio up to 320 ms.
    assert h.asked == [200 + AFTER_MS]
    assert h.reports == [(200, 320, "said until 320")]
    await h.hear(frames(200, QUIET))  # the same silence goes on, short of the turn's end
    assert h.asked == [320] and len(h.reports) == 1
    assert h.counts == {"reported": 1}
    assert h.claims == [] and h.resumed == []


async def test_speech_after_a_reported_pause_is_told_as_resumed() -> None:
    h = await paused()
    await h.hear(frames(FRAME, SPEECH))
    assert h.resumed == [340]  # the end of the frame that resumed it
    assert h.counts == {"reported": 1, "resumed": 1}
    await h.hear(frames(100, SPEECH))
    assert h.resumed == [340]  # once


async def test_the_turn_ending_in_the_pause_takes_its_text() -> None:
    h = await paused()
    await h.hear(frames(500, QUIET))
    (claim,) = h.claims
    assert claim is not None
    assert await claim == "said until 320"
    assert h.asked == [320]  # no second transcription
    assert h.counts == {"reported": 1, "ended": 1}
    assert h.resumed == []


async def test_a_turn_ending_before_the_text_is_ready_still_takes_it_unreported() -> None:
    h = Heard()
    h.gate.clear()
    await h.hear(frames(200, SPEECH) + frames(500, QUIET))
    (claim,) = h.claims
    assert claim is not None and h.asked == [320]
    pending = asyncio.ensure_future(claim)
    await settle()
    assert not pending.done()
    h.gate.set()
    assert await pending == "said until 320"
    assert h.reports == []  # the turn's end told it: no pause to report now
    assert h.counts == {"ended": 1}


async def test_speech_before_the_text_is_ready_drops_it_untold() -> None:
    h = Heard()
    h.gate.clear()
    await h.hear(frames(200, SPEECH) + frames(AFTER_MS, QUIET))
    assert h.asked == [320]
    await h.hear(frames(100, SPEECH))
    assert h.cancelled == 1
    h.gate.set()
    await settle()
    assert h.reports == [] and h.resumed == [] and h.counts == {}


async def test_a_turn_ending_after_speech_resumed_does_not_take_the_pause() -> None:
    """Speech and the turn's end in one burst the VAD ran before the pauses
    looked again: the stop is in another silence, so the pause's text is not it."""
    h = Heard()
    h.gate.clear()
    await h.hear(frames(200, SPEECH) + frames(AFTER_MS, QUIET))
    await h.hear(frames(200, SPEECH) + frames(500, QUIET), batched=True)
    assert h.claims == [None]
    await settle()
    assert h.cancelled == 1
    h.gate.set()
    await settle()
    assert h.reports == [] and h.counts == {}


async def test_a_reported_pause_then_more_words_then_the_end_is_not_its_text() -> None:
    h = await paused()
    await h.hear(frames(200, SPEECH) + frames(500, QUIET), batched=True)
    assert h.claims == [None]
    assert h.asked == [320]


async def test_a_second_silence_after_speech_resumed_is_reported_again() -> None:
    h = await paused()
    await h.hear(frames(200, SPEECH) + frames(AFTER_MS, QUIET))
    # Resumed at 340, spoke until 520: the new silence's text is up to 640.
    assert h.resumed == [340]
    assert h.reports == [(200, 320, "said until 320"), (520, 640, "said until 640")]
    await h.hear(frames(500, QUIET))
    (claim,) = h.claims
    assert claim is not None and await claim == "said until 640"
    assert h.counts == {"reported": 2, "resumed": 1, "ended": 1}


@pytest.mark.parametrize(("after_ms", "enabled"), [(0, True), (AFTER_MS, False)])
async def test_pauses_off_are_never_reported(after_ms: int, enabled: bool) -> None:
    h = Heard(after_ms=after_ms, enabled=enabled)
    await h.hear(frames(200, SPEECH) + frames(300, QUIET) + frames(200, SPEECH))
    await h.hear(frames(500, QUIET))
    assert h.asked == [] and h.reports == [] and h.resumed == []
    assert h.claims == [None] and h.counts == {}


async def test_a_dropped_pause_is_not_reported_nor_claimed() -> None:
    h = Heard()
    h.gate.clear()
    await h.hear(frames(200, SPEECH) + frames(AFTER_MS, QUIET))
    h.pauses.drop()
    h.endpointer.reset()  # the input was cleared: the utterance is gone
    await settle()
    assert h.cancelled == 1
    h.gate.set()
    await h.hear(frames(100, QUIET))
    assert h.reports == [] and h.counts == {} and h.asked == [320]
