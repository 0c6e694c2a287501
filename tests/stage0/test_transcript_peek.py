"""`StreamingTranscript.peek`: the text of the utterance so far, as `take`
would give it, leaving its pieces in place for the turn's end (a pause, not
an end). The transcriber is the test's own: it names how much audio it was
given, and counts its calls."""

from __future__ import annotations

import asyncio

from antiphon.stage0.backends.cascade.asr.transcript import BYTES_PER_MS, StreamingTranscript
from tests.stage0.test_transcript import Heard, quiet, speak_into, tone

# A piece cut in the pause at ~2.55 s, then a tail long enough to stand alone.
LONG_TAIL = tone(2500) + quiet(100) + tone(900) + tone(2000)
# The same, with a tail too short for Whisper alone: heard with the piece before it.
SHORT_TAIL = tone(2500) + quiet(100) + tone(900) + tone(400)


async def test_peek_gives_what_take_gives_and_take_still_uses_the_pieces() -> None:
    heard = Heard()
    stream = StreamingTranscript(heard, segment_ms=3000)
    utterance = await speak_into(stream, LONG_TAIL)
    (first,) = heard.calls
    assert 2500 <= first <= 2600
    peeked = await stream.peek(utterance, 0)
    assert peeked == f"<{first}> <{5500 - first}>"
    # The peek paid for the tail alone, and the piece is still there...
    assert heard.calls == [first, 5500 - first]
    taken = await stream.take(utterance, 0)
    assert taken == peeked
    # ...so the end transcribed its tail again, and not the piece.
    assert heard.calls == [first, 5500 - first, 5500 - first]


async def test_peek_with_a_short_tail_hears_it_with_the_last_piece_and_keeps_that_piece() -> None:
    heard = Heard()
    stream = StreamingTranscript(heard, segment_ms=3000)
    utterance = await speak_into(stream, SHORT_TAIL)
    (first,) = heard.calls
    peeked = await stream.peek(utterance, 0)
    assert peeked == "<3900>"
    assert heard.calls == [first, 3900]
    # The last piece was not cancelled by the peek: the utterance goes on, and
    # once its tail is long enough, that piece is its first part.
    more = utterance + tone(1600)
    assert await stream.peek(more, 0) == f"<{first}> <{5500 - first}>"
    assert await stream.take(more, 0) == f"<{first}> <{5500 - first}>"
    assert heard.calls == [first, 3900, 5500 - first, 5500 - first]


async def test_a_peek_of_the_audio_so_far_then_a_take_of_more() -> None:
    """A pause's text (the audio up to it) and then the turn's (more words after it)."""
    heard = Heard()
    stream = StreamingTranscript(heard, segment_ms=3000)
    utterance = await speak_into(stream, LONG_TAIL)
    (first,) = heard.calls
    assert await stream.peek(utterance[: 4200 * BYTES_PER_MS], 0) == (f"<{first}> <{4200 - first}>")
    assert await stream.take(utterance, 0) == f"<{first}> <{5500 - first}>"
    assert heard.calls == [first, 4200 - first, 5500 - first]


async def test_peek_follows_the_stream_clock() -> None:
    heard = Heard()
    stream = StreamingTranscript(heard, segment_ms=3000)
    utterance = await speak_into(stream, LONG_TAIL, start_ms=7000)
    (first,) = heard.calls
    peeked = await stream.peek(utterance, 7000)
    assert peeked == await stream.take(utterance, 7000) == f"<{first}> <{5500 - first}>"
    assert len(heard.calls) == 3


async def test_peek_waits_for_a_piece_in_flight_and_leaves_it_running() -> None:
    release = asyncio.Event()
    calls: list[int] = []

    async def slow(pcm: bytes) -> str:
        calls.append(len(pcm) // BYTES_PER_MS)
        if len(pcm) > 2000 * BYTES_PER_MS:
            await release.wait()
        return str(len(pcm) // BYTES_PER_MS)

    stream = StreamingTranscript(slow, segment_ms=3000)
    utterance = tone(2500) + quiet(100) + tone(2000)
    stream.update(utterance, 0)
    peeking = asyncio.ensure_future(stream.peek(utterance, 0))
    await asyncio.sleep(0.01)
    assert not peeking.done()
    release.set()
    first, tail = (int(x) for x in (await peeking).split())
    assert first + tail == 4600 and 2500 <= first <= 2600
    # The piece finished for the peek is the take's too: not heard again.
    assert await stream.take(utterance, 0) == f"{first} {tail}"
    assert calls == [first, tail, tail]


async def test_segmenting_off_peeks_the_whole_utterance() -> None:
    heard = Heard()
    stream = StreamingTranscript(heard, segment_ms=0)
    utterance = await speak_into(stream, LONG_TAIL)
    assert await stream.peek(utterance, 0) == "<5500>"
    assert await stream.take(utterance, 0) == "<5500>"
    assert heard.calls == [5500, 5500]
