"""The listener never waits on a clause's end (playout.py, synthesis.py): when
a response's audio is about to run out at the client and no clause is ready,
the whole words already written are spoken; before any audio, and while a
clause is still waiting, nothing is cut early. The real session, scheduler and
voice thread on the `synthetic` voice (audio length by characters)."""

from __future__ import annotations

import asyncio

from antiphon.stage1.backends.synthetic.voice import SyntheticTts
from antiphon.stage1.speech.clauses import ClauseSplitter
from antiphon.stage1.speech.synthesis import SynthesisSession
from tests.stage1.speaking import Heard, Speaker, text
from tests.stage1.test_synthesis import RATE

# 10 ms of audio per character: "Hello there" plays for 110 ms.
MS_PER_CHAR = 10.0
GUARD_MS = 60


def voice() -> SyntheticTts:
    return SyntheticTts(out_rate=RATE, ms_per_char=MS_PER_CHAR)


def guarded(speaker: Speaker, guard_ms: int) -> SynthesisSession:
    return speaker(voice(), first_clause_words=2, underrun_guard_ms=guard_ms)


async def test_words_written_are_spoken_before_the_audio_runs_out(
    speaker: Speaker, heard: Heard
) -> None:
    speaking = guarded(speaker, GUARD_MS)
    speaking.handle(text("r", "Hello there my"))  # the first phrase: "Hello there"
    await heard.until(lambda: len(heard.texts("r")) == 1)
    # The LLM writes on slower than speech, no clause end in sight.
    speaking.handle(text("r", " good friend of"))
    await heard.until(lambda: len(heard.texts("r")) == 2, timeout_s=2)
    assert heard.texts("r") == ["Hello there", " my good friend"]
    speaking.handle(text("r", " mine.", final=True))
    await heard.done("r")
    # Every character spoken once, in order.
    assert "".join(heard.texts("r")) == "Hello there my good friend of mine."


async def test_without_the_guard_words_wait_for_their_clause(
    speaker: Speaker, heard: Heard
) -> None:
    speaking = guarded(speaker, 0)
    speaking.handle(text("r", "Hello there my"))
    await heard.until(lambda: len(heard.texts("r")) == 1)
    speaking.handle(text("r", " good friend of"))
    await asyncio.sleep(0.4)  # the first phrase (110 ms) has long played out
    assert heard.texts("r") == ["Hello there"]


async def test_nothing_is_cut_before_the_first_audio(speaker: Speaker, heard: Heard) -> None:
    speaking = guarded(speaker, GUARD_MS)
    speaking.handle(text("r", "Hello"))
    await asyncio.sleep(0.3)
    assert heard.audio == []


def test_take_words_keeps_the_word_still_being_written() -> None:
    splitter = ClauseSplitter(first_words=0)
    assert splitter.feed("so the capital of Fra") == []
    assert splitter.take_words() == "so the capital of"
    assert splitter.pending == " Fra"
    assert splitter.take_words() == ""  # no whole word yet
    assert splitter.feed("nce is Paris. And") == [" France is Paris."]
    assert splitter.flush() == " And"
