"""The playback ledger: word marks on the response clock, and what a listener heard."""

from __future__ import annotations

from typing import cast

import pytest

from antiphon.session.actor.errors import Rejection
from antiphon.session.assistant.playback import Ledger, Playback
from antiphon.session.conversation.conversation import Conversation
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb


def marks(*pairs: tuple[int, int]) -> list[cpb.AudioTextMark]:
    return [cpb.AudioTextMark(text_chars=c, audio_end_ms=ms) for c, ms in pairs]


def two_chunks() -> Ledger:
    ledger = Ledger(response_id="resp_1", item_id="item_1")
    ledger.add_chunk(
        "The capital of France", 1200, marks((3, 200), (11, 600), (14, 800), (21, 1200))
    )
    ledger.add_chunk(" is Paris.", 700, marks((3, 250), (10, 700)))
    return ledger


def test_marks_move_onto_the_response_clock() -> None:
    ledger = two_chunks()
    assert ledger.marks[-2:] == [(24, 1450), (31, 1900)]
    assert (ledger.generated_ms, ledger.sent_ms) == (1900, 1900)


def test_heard_keeps_whole_words_whose_audio_ended() -> None:
    ledger = two_chunks()
    assert ledger.heard(0) == ""
    assert ledger.heard(799) == "The capital"
    assert ledger.heard(800) == "The capital of"
    assert ledger.heard(1449) == "The capital of France"
    assert ledger.heard(1900) == "The capital of France is Paris."


def test_a_voice_without_word_marks_ends_its_words_with_the_chunk() -> None:
    ledger = Ledger(response_id="r", item_id="i")
    ledger.add_chunk("Hello there.", 900, [])
    ledger.add_chunk(" Bye.", 400, [])
    assert ledger.heard(899) == ""
    assert ledger.heard(1000) == "Hello there."


async def test_the_audio_a_client_counts_in_samples_can_be_truncated_to_its_end() -> None:
    """Chunks of 24,010 samples at 24 kHz are 1,000.42 ms each: three are
    3,001.25 ms, which a client that counts samples and rounds up truncates
    at 3,002, not past the audio; summing whole milliseconds said 3,000."""
    ledger = Ledger(response_id="r", item_id="i")
    for word in ("One.", " Two.", " Three."):
        ledger.add_chunk(word, 1000 * 24_010 / 24_000, [])
    assert (ledger.generated_ms, ledger.sent_ms) == (3002, 3002)
    assert ledger.marks == [(4, 1000), (9, 2001), (16, 3001)]
    assert ledger.heard(3001) == "One. Two. Three."
    playback = Playback(cast(Conversation, None))
    playback.ended(ledger)
    with pytest.raises(Rejection, match="past the item's audio"):
        await playback.truncate("i", 3003)


def test_acks_only_move_forward_and_never_past_what_was_sent() -> None:
    ledger = two_chunks()
    ledger.acknowledge(1000, 800)
    ledger.acknowledge(500, 400)  # late and reordered: ignored
    assert (ledger.played_ms, ledger.committed_ms) == (1000, 800)
    ledger.acknowledge(5000, 5000)
    assert (ledger.played_ms, ledger.committed_ms) == (1900, 1900)


async def test_recent_ledgers_are_found_by_response_or_item_and_bounded() -> None:
    playback = Playback(cast(Conversation, None), keep=2)
    for n in range(3):
        playback.ended(Ledger(response_id=f"resp_{n}", item_id=f"item_{n}"))
    with pytest.raises(Rejection):  # the oldest is forgotten
        await playback.acknowledge(spb.PlaybackAck(response_id="resp_0"), None, ack_only=False)
    found = await playback.acknowledge(spb.PlaybackAck(item_id="item_2"), None, ack_only=False)
    assert found.response_id == "resp_2"
