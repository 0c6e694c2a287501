"""Streaming transcription: pieces cut at quiet points while the user speaks."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from antiphon.stage0.assets import Stage0Assets
from antiphon.stage0.backends.cascade.asr.asr import WhisperAsr
from antiphon.stage0.backends.cascade.asr.asr_text import drop_repeats
from antiphon.stage0.backends.cascade.asr.transcript import (
    BYTES_PER_MS,
    StreamingTranscript,
    pause_cut,
)
from tests.support.speech import spoken


def tone(ms: int, amplitude: int = 8000) -> bytes:
    t = np.arange(16 * ms) / 16_000
    return (amplitude * np.sin(2 * np.pi * 220 * t)).astype("<i2").tobytes()


def quiet(ms: int) -> bytes:
    return bytes(16 * ms * 2)


class Heard:
    """A transcriber that names how much audio it was given, and records each call."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    async def __call__(self, pcm: bytes) -> str:
        self.calls.append(len(pcm) // BYTES_PER_MS)
        await asyncio.sleep(0)
        return f"<{len(pcm) // BYTES_PER_MS}>"


async def speak_into(stream: StreamingTranscript, audio: bytes, start_ms: int = 0) -> bytes:
    """Append `audio` 200 ms at a time, as a client would, letting pieces run
    (`start_ms`: where the utterance starts on the stream clock)."""
    utterance = bytearray()
    step = 200 * BYTES_PER_MS
    for i in range(0, len(audio), step):
        utterance += audio[i : i + step]
        stream.update(utterance, start_ms)
        await asyncio.sleep(0)
    return bytes(utterance)


def test_a_cut_lands_in_the_last_pause_and_never_inside_a_word() -> None:
    pcm = tone(1800) + quiet(150) + tone(700) + quiet(150) + tone(400)
    cut = pause_cut(pcm)
    assert cut is not None and cut % 2 == 0
    assert 2650 * BYTES_PER_MS <= cut <= 2800 * BYTES_PER_MS  # the second pause
    assert pause_cut(tone(3000)) is None
    forced = pause_cut(tone(3000), force=True)
    assert forced is not None and forced >= 1500 * BYTES_PER_MS


async def test_pieces_are_transcribed_while_speaking_and_only_the_tail_at_the_end() -> None:
    heard = Heard()
    stream = StreamingTranscript(heard, segment_ms=3000)
    audio = tone(2500) + quiet(100) + tone(900) + tone(2000)
    utterance = await speak_into(stream, audio)
    assert len(heard.calls) == 1
    first = heard.calls[0]
    assert 2500 <= first <= 2600  # cut in the pause, long before the end
    text = await stream.take(utterance, 0)
    assert heard.calls[1:] == [5500 - first]  # the end paid for the tail alone
    assert text == f"<{first}> <{5500 - first}>"


async def test_a_short_tail_is_heard_with_the_piece_before_it() -> None:
    heard = Heard()
    stream = StreamingTranscript(heard, segment_ms=3000)
    utterance = await speak_into(stream, tone(2500) + quiet(100) + tone(900) + tone(400))
    assert len(heard.calls) == 1
    assert await stream.take(utterance, 0) == f"<{3900}>"


async def test_take_waits_for_a_piece_in_flight_and_keeps_order() -> None:
    release = asyncio.Event()

    async def slow(pcm: bytes) -> str:
        if len(pcm) > 2000 * BYTES_PER_MS:
            await release.wait()
        return str(len(pcm) // BYTES_PER_MS)

    stream = StreamingTranscript(slow, segment_ms=3000)
    utterance = tone(2500) + quiet(100) + tone(2000)
    stream.update(utterance, 0)
    pending = asyncio.ensure_future(stream.take(utterance, 0))
    await asyncio.sleep(0.01)
    assert not pending.done()
    release.set()
    first, tail = (int(x) for x in (await pending).split())
    assert first + tail == 4600 and 2500 <= first <= 2600


async def test_cuts_follow_the_stream_clock_and_reset_forgets() -> None:
    heard = Heard()
    stream = StreamingTranscript(heard, segment_ms=1000)
    stream.update(tone(1800) + quiet(150) + tone(200), 5000)  # starts 5 s into the stream
    await asyncio.sleep(0)
    assert heard.calls and 1800 <= heard.calls[0] <= 1950
    stream.reset()
    assert await stream.take(tone(300), 6000) == "<300>"


def test_segmenting_off_transcribes_whole_utterances() -> None:
    async def run() -> tuple[list[int], str]:
        heard = Heard()
        stream = StreamingTranscript(heard, segment_ms=0)
        utterance = await speak_into(stream, tone(2500) + quiet(100) + tone(5000))
        return heard.calls, await stream.take(utterance, 0)

    calls, text = asyncio.run(run())
    assert calls == [7600] and text == "<7600>"


def test_repeated_sentences_from_a_looping_decode_are_dropped() -> None:
    assert drop_repeats("What is 2 plus 2? What is 2 plus 2? What is 2") == "What is 2 plus 2?"
    assert drop_repeats("Hello. Hello. Hello.") == "Hello."
    assert drop_repeats("I think so. I do.") == "I think so. I do."


@pytest.mark.models
async def test_a_long_utterance_streams_into_the_same_words(assets: Stage0Assets) -> None:
    asr = WhisperAsr(assets.whisper_dir, threads=1)
    loop = asyncio.get_running_loop()
    pieces: list[int] = []

    async def transcribe(pcm: bytes) -> str:
        pieces.append(len(pcm))
        return await loop.run_in_executor(None, asr.transcribe, pcm)

    speech = spoken(
        "The quick brown fox jumps over the lazy dog. "
        "Then the dog wakes up and chases the fox across the green field.",
        16_000,
    )
    stream = StreamingTranscript(transcribe, segment_ms=3000)
    utterance = bytearray()
    step = 200 * BYTES_PER_MS
    for i in range(0, len(speech), step):
        utterance += speech[i : i + step]
        stream.update(utterance, 0)
        await asyncio.sleep(0.1)
    text = await stream.take(bytes(utterance), 0)
    assert len(pieces) >= 2  # some of it was heard before the end
    words = set(re.findall(r"[a-z]+", text.lower()))
    assert {"brown", "fox", "lazy", "dog", "chases", "green", "field"} <= words, text
