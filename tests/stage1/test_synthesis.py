"""One session's speech synthesis (synthesis.py) on the real scheduler and voice
thread: clauses spoken in order as text streams in, a response's `done` after
its audio, epochs fenced by cancels, and a voice that fails on a clause.

The voice is the `synthetic` stage1 backend, or (to hold a clause on the
voice thread, or fail one) a scripted voice at the same boundary."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from prometheus_client import Histogram

from antiphon.stage1.backends.synthetic.voice import SyntheticTts
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.speech.voice import SpeechChunk
from antiphon.v1 import stage_pb2 as pb
from tests.stage1.speaking import Heard, Speaker, text

RATE = 24000
MS_PER_CHAR = 60.0


class ScriptedVoice:
    """A voice at synthesis.py's boundary: it records what it was asked to say,
    holds each clause until `release`, takes `takes_s` to voice it, and fails
    on the clauses in `fails`."""

    out_rate = RATE

    def __init__(
        self, *, fails: tuple[str, ...] = (), held: bool = False, takes_s: float = 0.0
    ) -> None:
        self.asked: list[str] = []
        self._fails = fails
        self._takes_s = takes_s
        self._loop = asyncio.get_running_loop()
        self.speaking = asyncio.Event()
        self._gate = asyncio.Event()
        if not held:
            self._gate.set()

    def release(self) -> None:
        self._gate.set()

    def synthesize(self, text: str, speed: float = 1.0) -> Iterator[SpeechChunk]:
        # On the voice thread: tell the test, then wait for its word.
        self.asked.append(text)
        self._loop.call_soon_threadsafe(self.speaking.set)
        asyncio.run_coroutine_threadsafe(self._gate.wait(), self._loop).result(timeout=5)
        if text in self._fails:
            raise RuntimeError(f"the voice cannot say {text!r}")
        time.sleep(self._takes_s)
        yield SpeechChunk(pcm16=b"\0\0" * (RATE // 100), text=text, duration_ms=10)


def cancel(epoch: int) -> pb.Stage1Request:
    return pb.Stage1Request(cancel=pb.Stage1Cancel(epoch=epoch))


def _count(histogram: Histogram) -> float:
    return _sample(histogram, "_count")


def _sample(histogram: Histogram, suffix: str) -> float:
    (metric,) = histogram.collect()
    return next(s.value for s in metric.samples if s.name.endswith(suffix))


def synthetic() -> SyntheticTts:
    return SyntheticTts(out_rate=RATE, ms_per_char=MS_PER_CHAR)


async def test_clauses_are_spoken_in_order_and_done_comes_after_the_audio(
    speaker: Speaker, heard: Heard, metrics: Stage1Metrics
) -> None:
    session = speaker(synthetic())
    session.handle(text("r1", "Hello there, my friend. How are", epoch=3))
    session.handle(text("r1", " you doing today? Fine.", epoch=3, final=True))
    done = await heard.done("r1")
    assert [e.WhichOneof("kind") for e in heard.events][-1] == "done"
    assert heard.texts("r1") == ["Hello there, my friend.", " How are you doing today?", " Fine."]
    assert all(a.epoch == 3 and a.sample_rate_hz == RATE for a in heard.audio)
    assert (done.epoch, done.response_id) == (3, "r1")
    assert done.first_audio_ms >= 0
    # One first audio per response, a real-time factor per clause.
    assert _count(metrics.first_audio) == 1
    assert _count(metrics.rtf) == 3


async def test_the_first_audio_is_told_apart_into_words_queue_and_voice(
    speaker: Speaker, heard: Heard, metrics: Stage1Metrics
) -> None:
    # One voice thread: "b"'s first clause waits while "a"'s is held on it.
    busy = ScriptedVoice(held=True)
    speaker(busy).handle(text("a", "Hold this one.", final=True))
    await busy.speaking.wait()
    session = speaker(ScriptedVoice(takes_s=0.08))
    session.handle(text("b", "Hello"))  # no clause yet: its words are still coming
    await asyncio.sleep(0.1)
    session.handle(text("b", " there, friend.", final=True))
    await asyncio.sleep(0.15)
    busy.release()
    await heard.done("b")
    await heard.done("a")
    words, queue, voice = (
        _sample(h, "_sum")
        for h in (metrics.first_audio_words, metrics.first_audio_queue, metrics.first_audio_voice)
    )
    # "a": voiced at once, held 0.25 s on the voice; "b": 0.1 s for its words,
    # 0.15 s behind "a", 0.08 s voiced.
    assert 0.1 <= words < 0.2
    assert 0.15 <= queue < 0.25
    assert voice >= 0.25 + 0.08
    assert abs(words + queue + voice - _sample(metrics.first_audio, "_sum")) < 1e-6
    assert _count(metrics.first_audio_voice) == _count(metrics.first_audio) == 2


async def test_the_first_clause_is_heard_before_the_text_is_final(
    speaker: Speaker, heard: Heard
) -> None:
    session = speaker(synthetic())
    session.handle(text("r1", "Hello there, my friend. How are"))
    await heard.until(lambda: bool(heard.audio))
    assert heard.texts("r1") == ["Hello there, my friend."] and not heard.dones
    session.handle(text("r1", " you?", final=True))
    await heard.done("r1")
    assert heard.texts("r1")[1:] == [" How are you?"]


async def test_audio_comes_at_the_rate_and_speed_the_session_opened_with(
    speaker: Speaker, heard: Heard
) -> None:
    session = speaker(synthetic())
    session.handle(pb.Stage1Request(open=pb.Stage1Open(sample_rate_hz=8000, speed=2.0)))
    words = "Slow down there."
    session.handle(text("r1", words, final=True))
    await heard.done("r1")
    (chunk,) = heard.audio
    assert chunk.duration_ms == round(len(words) * MS_PER_CHAR / 2.0)
    assert chunk.sample_rate_hz == 8000
    assert abs(len(chunk.pcm16) // 2 - chunk.duration_ms * 8) <= 1


async def test_a_cancel_fences_out_the_clause_being_spoken_and_those_queued(
    speaker: Speaker, heard: Heard
) -> None:
    voice = ScriptedVoice(held=True)
    session = speaker(voice)
    session.handle(text("old", "One thing here. Two things here. Three.", final=True))
    await voice.speaking.wait()
    session.handle(cancel(1))
    voice.release()
    session.handle(text("new", "Next one.", epoch=1, final=True))
    await heard.done("new")
    assert all(e.WhichOneof("kind") != "done" or e.done.response_id == "new" for e in heard.events)
    assert heard.texts("old") == []
    # The queued clauses of the cancelled answer never reached the voice.
    assert voice.asked == ["One thing here.", "Next one."]


async def test_requests_older_than_a_cancel_are_dropped(speaker: Speaker, heard: Heard) -> None:
    session = speaker(synthetic())
    session.handle(cancel(2))
    session.handle(text("late", "Too late to say.", epoch=1, final=True))
    session.handle(text("now", "Just in time.", epoch=2, final=True))
    await heard.done("now")
    assert {a.response_id for a in heard.audio} == {"now"}
    assert [d.response_id for d in heard.dones] == ["now"]


async def test_a_cancel_drops_text_not_yet_cut_into_a_clause(
    speaker: Speaker, heard: Heard
) -> None:
    """An unfinished clause of a cancelled answer never joins a later one of the same id."""
    session = speaker(synthetic())
    session.handle(text("r1", "Half a sentence without"))
    session.handle(cancel(1))
    session.handle(text("r1", "Again.", epoch=1, final=True))
    await heard.done("r1")
    assert heard.texts("r1") == ["Again."]


async def test_a_clause_the_voice_fails_on_ends_its_response_with_an_error(
    speaker: Speaker, heard: Heard
) -> None:
    """No `done` and nothing more of that response; the next one is spoken."""
    voice = ScriptedVoice(fails=("Broken clause here.",))
    session = speaker(voice)
    session.handle(text("bad", "Broken clause here. More words.", final=True))
    session.handle(text("good", "Fine.", final=True))
    await heard.done("good")
    (error,) = heard.errors
    assert (error.response_id, error.code) == ("bad", "synthesis_failed")
    assert "Broken clause here." in error.message
    assert heard.texts("bad") == [] and [d.response_id for d in heard.dones] == ["good"]
    assert voice.asked == ["Broken clause here.", "Fine."]
    assert heard.texts("good") == ["Fine."]


async def test_requests_of_no_kind_or_of_a_model_frame_change_nothing(
    speaker: Speaker, heard: Heard
) -> None:
    """A text voice ignores empty requests and decode frames (the mimi backend's)."""
    session = speaker(synthetic())
    session.handle(pb.Stage1Request())
    session.handle(pb.Stage1Request(frame=pb.DecodeFrame(epoch=5, response_id="r1")))
    session.handle(text("r1", "Still here.", final=True))
    await heard.done("r1")
    assert heard.texts("r1") == ["Still here."]
