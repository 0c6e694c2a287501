"""A `minicpmo` stage1 session: the thinker's units in, a chunk of speech a
spoken unit out, on the real tiny random talker and token2wav (greedy).

What it must hold: each session's speech is what it says alone while others
speak beside it (the talker's codes and token2wav's audio are the session's
own); a unit of a cancelled answer is not spoken and its turn is dropped;
a turn the model ends (`<|turn_eos|>`) flushes what token2wav held and the
next unit starts afresh; a final `SynthesizeText` ends a response once its
units are spoken; a frame of ids the thinker cannot have sent is an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage1.backends.minicpmo import voice as minicpmo_voice
from antiphon.stage1.backends.minicpmo.session import UnitMetrics, UnitSession
from antiphon.stage1.backends.minicpmo.voice import Voice
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.settings import Stage1Settings
from antiphon.v1 import stage_pb2 as pb

pytestmark = pytest.mark.models

# Units of text ids the tiny tokenizer knows.
TEXTS = {"a": [[41, 42, 43], [44, 45], [46]], "b": [[90, 91], [92, 93, 94], [95, 96]]}


@pytest.fixture(scope="module")
def voice() -> Iterator[Voice]:
    settings = Stage1Settings(
        backend="minicpmo", duplex_checkpoint="random:tiny", duplex_seed=7, duplex_temperature=0
    )
    loaded = minicpmo_voice.load(settings)
    try:
        yield loaded
    finally:
        loaded.close()


class Recorder:
    def __init__(self, voice: Voice, session_id: str = "s", rate: int = 24000) -> None:
        self.events: list[pb.Stage1Event] = []
        self._emitted = asyncio.Event()
        registry = CollectorRegistry()
        self.units = UnitMetrics(registry)
        self.registry = registry
        self.session = UnitSession(voice, Stage1Metrics(registry), self.units, self._emit)
        self.session.handle(
            pb.Stage1Request(open=pb.Stage1Open(session_id=session_id, sample_rate_hz=rate))
        )

    def frame(self, index: int, tokens: list[int], response: str = "r1", epoch: int = 1) -> None:
        frame = pb.DecodeFrame(
            epoch=epoch, response_id=response, tokens=tokens, text=f" u{index}", index=index
        )
        self.session.handle(pb.Stage1Request(frame=frame))

    def end(self, response: str = "r1", epoch: int = 1) -> None:
        text = pb.SynthesizeText(epoch=epoch, response_id=response, final=True)
        self.session.handle(pb.Stage1Request(text=text))

    def _emit(self, event: pb.Stage1Event) -> None:
        self.events.append(event)
        self._emitted.set()

    async def until(self, done: Callable[[], bool]) -> None:
        async with asyncio.timeout(30):
            while not done():
                self._emitted.clear()
                await self._emitted.wait()

    async def until_done(self, response: str = "r1") -> None:
        await self.until(lambda: any(e.done.response_id == response for e in self.events))

    def audio(self) -> list[bytes]:
        return [e.audio.pcm16 for e in self.events if e.HasField("audio")]

    def kinds(self) -> list[str]:
        return [e.WhichOneof("kind") or "" for e in self.events]


async def _speak(voice: Voice, units: list[list[int]], session_id: str = "s") -> list[bytes]:
    rec = Recorder(voice, session_id)
    try:
        for i, tokens in enumerate(units):
            rec.frame(i, tokens)
        rec.end()
        await rec.until_done()
    finally:
        await rec.session.close()
    return rec.audio()


async def test_each_spoken_unit_is_one_chunk_with_its_text_then_the_response_ends(
    voice: Voice,
) -> None:
    rec = Recorder(voice)
    try:
        rec.frame(0, [], response="")  # the model listened
        for i, tokens in enumerate(TEXTS["a"], start=1):
            rec.frame(i, tokens)
        rec.end()
        await rec.until_done()
    finally:
        await rec.session.close()
    assert rec.kinds() == ["audio", "audio", "audio", "done"]
    chunks = [e.audio for e in rec.events if e.HasField("audio")]
    assert [c.text for c in chunks] == [" u1", " u2", " u3"]
    # 25 codes a unit at 24 kHz: the turn's first call keeps back 160 ms for
    # its cross-fade, the others give a second each.
    assert [len(c.pcm16) // 2 for c in chunks] == [24000 - 3840, 24000, 24000]
    assert all(c.marks[0].text_chars == len(c.text) for c in chunks)
    assert all(np.frombuffer(c.pcm16, "<i2").any() for c in chunks)
    spoken = rec.registry.get_sample_value(
        "antiphon_stage1_duplex_units_total", {"outcome": "spoken"}
    )
    silent = rec.registry.get_sample_value(
        "antiphon_stage1_duplex_units_total", {"outcome": "silent"}
    )
    assert (spoken, silent) == (3, 1)


async def test_a_session_says_what_it_says_alone_while_another_speaks_beside_it(
    voice: Voice,
) -> None:
    alone = {name: await _speak(voice, units, name) for name, units in TEXTS.items()}
    together = await asyncio.gather(*(_speak(voice, units, name) for name, units in TEXTS.items()))
    for name, chunks in zip(TEXTS, together, strict=True):
        # Batched products round apart in the last bits: a sample may land
        # one step of 16-bit audio over.
        assert [len(c) for c in chunks] == [len(c) for c in alone[name]]
        for ours, theirs in zip(chunks, alone[name], strict=True):
            gap = np.abs(_samples(ours) - _samples(theirs))
            assert gap.max() <= 1, gap.max()
    assert alone["a"] != alone["b"]
    # Two sessions differ by more than that (the tiny flow hears codes faintly).
    assert np.abs(_samples(alone["a"][1]) - _samples(alone["b"][1])).max() > 2


def _samples(pcm16: bytes) -> np.ndarray:
    return np.frombuffer(pcm16, "<i2").astype(np.int32)


async def test_units_that_wait_together_are_spoken_in_one_batch_each_as_alone() -> None:
    """Units queued while the models are busy go in one batch, at most
    `duplex_batch` of them; each says what it says alone, and one whose ids
    the talker does not know fails alone."""
    sizes: list[int] = []
    settings = Stage1Settings(
        backend="minicpmo",
        duplex_checkpoint="random:tiny",
        duplex_seed=7,
        duplex_temperature=0,
        duplex_batch=3,
    )
    voice = await asyncio.to_thread(minicpmo_voice.load, settings, sizes.append)
    try:
        units = [TEXTS["a"][0], TEXTS["b"][0], TEXTS["a"][1], TEXTS["b"][1]]
        alone = [await voice.speak(voice.turn(key), tokens) for key, tokens in enumerate(units)]
        assert sizes == [1, 1, 1, 1]
        together = await asyncio.gather(
            *(voice.speak(voice.turn(key), tokens) for key, tokens in enumerate(units))
        )
        assert sizes[4:] == [3, 1]
        for a, b in zip(together, alone, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
        # Ten times the tolerance apart (the tiny flow hears codes faintly).
        assert np.abs(alone[0] - alone[1]).max() > 1e-4
        unknown = [10**7]  # past the talker's text table
        spoken, failed = await asyncio.gather(
            voice.speak(voice.turn(0), units[0]),
            voice.speak(voice.turn(9), unknown),
            return_exceptions=True,
        )
        assert isinstance(failed, ValueError) and "outside the talker" in str(failed)
        assert isinstance(spoken, np.ndarray)
        np.testing.assert_allclose(spoken, alone[0], atol=1e-5, rtol=0)
        assert sizes[6:] == [1]
    finally:
        voice.close()


@pytest.mark.parametrize("pipeline", [True, False])
async def test_the_talker_takes_the_next_batch_while_token2wav_voices_one_only_in_a_pipeline(
    pipeline: bool,
) -> None:
    """Pipelined, the talker speaks the units that came while token2wav
    voices a batch; one batch at a time, they wait for that batch's audio."""
    import threading

    sizes: list[int] = []
    talked = threading.Event()

    def on_batch(units: int) -> None:  # on the talker's thread
        sizes.append(units)
        talked.set()

    settings = Stage1Settings(
        backend="minicpmo",
        duplex_checkpoint="random:tiny",
        duplex_seed=7,
        duplex_temperature=0,
        duplex_voice_pipeline=pipeline,
    )
    voice = await asyncio.to_thread(minicpmo_voice.load, settings, on_batch)
    # token2wav held until the test lets it go (its thread waits on the gate).
    gate = threading.Event()
    token2wav = voice._token2wav
    push_batch = token2wav.push_batch

    def held(pushes: Any) -> list[np.ndarray]:
        gate.wait(30)
        return push_batch(pushes)

    token2wav.push_batch = held  # type: ignore[method-assign]
    try:
        first = asyncio.ensure_future(voice.speak(voice.turn(0), TEXTS["a"][0]))
        assert await asyncio.to_thread(talked.wait, 30)
        later = [
            asyncio.ensure_future(voice.speak(voice.turn(key), tokens))
            for key, tokens in ((1, TEXTS["b"][0]), (2, TEXTS["a"][1]))
        ]
        await asyncio.sleep(1.0)
        assert sizes == ([1, 2] if pipeline else [1])
        gate.set()
        async with asyncio.timeout(30):
            await asyncio.gather(first, *later)
        assert sizes == [1, 2]
    finally:
        gate.set()
        voice.close()


async def test_a_cancelled_answer_is_not_spoken_and_the_next_starts_a_new_turn(
    voice: Voice,
) -> None:
    rec = Recorder(voice)
    try:
        rec.frame(0, TEXTS["a"][0])
        await rec.until(lambda: bool(rec.audio()))
        rec.session.handle(pb.Stage1Request(cancel=pb.Stage1Cancel(epoch=2)))
        rec.frame(1, TEXTS["a"][1], epoch=1)  # late: of the cancelled answer
        rec.frame(2, TEXTS["b"][0], response="r2", epoch=2)
        rec.end("r2", epoch=2)
        await rec.until_done("r2")
    finally:
        await rec.session.close()
    audio = [e.audio for e in rec.events if e.HasField("audio")]
    assert [(a.response_id, a.text) for a in audio] == [("r1", " u0"), ("r2", " u2")]
    # The answer after the cancel opened a turn of its own: its first call
    # keeps back the cross-fade, where the cut turn's next unit would not.
    assert len(audio[1].pcm16) // 2 == 24000 - 3840


async def test_a_turn_the_model_ends_flushes_its_audio_and_the_next_unit_starts_afresh(
    voice: Voice,
) -> None:
    rec = Recorder(voice)
    try:
        rec.frame(0, [*TEXTS["a"][0], voice.turn_eos])
        rec.frame(1, TEXTS["a"][1])
        rec.end()
        await rec.until_done()
    finally:
        await rec.session.close()
    first, second = rec.audio()
    # The ended turn gave its second, what it held back and its lookahead.
    assert len(first) // 2 == 24000 + 2880
    assert len(second) // 2 == 24000 - 3840


async def test_ids_the_thinker_cannot_have_sent_are_an_invalid_frame(voice: Voice) -> None:
    rec = Recorder(voice)
    try:
        rec.frame(0, [voice.vocabulary])
        rec.frame(1, [-1])
        await asyncio.sleep(0.05)
    finally:
        await rec.session.close()
    assert [e.error.code for e in rec.events] == ["invalid_frame", "invalid_frame"]


async def test_a_session_at_16_khz_gets_its_units_resampled(voice: Voice) -> None:
    rec = Recorder(voice, rate=16000)
    try:
        for i, tokens in enumerate(TEXTS["a"]):
            rec.frame(i, tokens)
        rec.end()
        await rec.until_done()
    finally:
        await rec.session.close()
    chunks = [e.audio for e in rec.events if e.HasField("audio")]
    assert {c.sample_rate_hz for c in chunks} == {16000}
    # A streaming resampler's output: all of it but what its filter still holds (< 50 ms).
    total = sum(len(c.pcm16) // 2 for c in chunks)
    assert 0 < 16000 * (3 * 24000 - 3840) / 24000 - total < 800, total
