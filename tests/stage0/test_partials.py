"""Partial transcripts of the utterance being spoken (partials.py), on a real
endpointer fed speech probabilities frame by frame, as the cascade runs it:
the VAD first, then `watch`. The ASR is a script of what each pass hears."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from antiphon.stage0.backends.cascade.listening.partials import Partials, agreed
from antiphon.stage0.backends.cascade.listening.vad import Endpointer, SpeechStopped
from tests.stage0.vad_frames import CONFIG, FRAME, QUIET, SPEECH, frames

EVERY_MS = 400


class Heard:
    """One session's endpointer and partials; each pass hears the next of `passes`."""

    def __init__(self, passes: list[str], *, every_ms: int = EVERY_MS) -> None:
        self.endpointer = Endpointer(CONFIG)
        self.passes = list(passes)
        self.asked: list[int] = []  # the ends of the audio transcribed
        self.reports: list[str] = []
        # Set: a pass answers at once; clear: it waits.
        self.gate = asyncio.Event()
        self.gate.set()
        self.partials = Partials(
            every_ms=every_ms,
            text_until=self._text_until,
            report=self.reports.append,
            count=lambda: None,
        )
        self.partials.enabled = True

    async def _text_until(self, end_ms: int) -> str:
        self.asked.append(end_ms)
        await self.gate.wait()
        return self.passes.pop(0)

    async def hear(self, probabilities: Iterable[float]) -> None:
        for p in probabilities:
            if isinstance(self.endpointer.update(p, FRAME), SpeechStopped):
                self.partials.reset()
            self.partials.watch(self.endpointer)
            for _ in range(3):
                await asyncio.sleep(0)


def test_agreed_is_the_common_start_in_whole_words() -> None:
    assert agreed("what is the cap".split(), "what is the capital".split()) == [
        "what",
        "is",
        "the",
    ]
    assert agreed([], ["what"]) == []
    assert agreed(["who"], ["what", "is"]) == []


async def test_words_two_passes_agree_on_go_out_and_only_grow() -> None:
    heard = Heard(
        [
            "What is",
            "What is the cap",
            "What is the capital of",
            "What's the capital of France",  # revises a word already out: no agreement
            "What is the capital of France",
            "What is the capital of France",
        ]
    )
    await heard.hear(frames(2600, SPEECH))
    # A pass every 400 ms of speech, from the first confirmed speech frame on.
    assert len(heard.asked) == 6
    assert all(b - a == EVERY_MS for a, b in zip(heard.asked, heard.asked[1:], strict=False))
    assert heard.reports == ["What is", "What is the", "What is the capital of France"]


async def test_no_pass_in_silence_and_the_next_utterance_starts_afresh() -> None:
    heard = Heard(["one two", "one two three", "four", "four five"])
    await heard.hear(frames(900, SPEECH))
    asked = len(heard.asked)
    await heard.hear(frames(400, QUIET))  # a pause: no partial pass while it lasts
    assert len(heard.asked) == asked
    await heard.hear(frames(200, QUIET))  # the utterance ended
    await heard.hear(frames(900, SPEECH))
    # The second utterance agrees with itself only, not with the first's words.
    assert heard.reports == ["one two", "four"]


async def test_one_pass_at_a_time() -> None:
    heard = Heard(["a b", "a b c"])
    heard.gate.clear()
    await heard.hear(frames(1500, SPEECH))
    assert len(heard.asked) == 1  # the first pass still runs: none more starts
    heard.gate.set()
    await heard.hear(frames(300, SPEECH))
    assert len(heard.asked) == 2 and heard.reports == ["a b"]


async def test_off_at_zero() -> None:
    heard = Heard([], every_ms=0)
    await heard.hear(frames(2000, SPEECH))
    assert heard.asked == [] and heard.reports == []
