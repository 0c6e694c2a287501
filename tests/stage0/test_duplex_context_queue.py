"""A row's context queue paces its words by the model's own text (context.py):
a word's pieces firm on consecutive frames, the next word offered while the
model pads, firm after its `EPAD` or `PAD_BUDGET` pads; the first word of an
idle queue firm at once; contexts taken in order; the bound refuses whole."""

from __future__ import annotations

import pytest

from antiphon.stage0.backends.moshi.context import PAD_BUDGET, ContextQueue, Offer, Taken, words

PAD, EPAD = 3, 0


def queue(limit: int = 100) -> ContextQueue:
    return ContextQueue(limit, pad=PAD, end_pad=EPAD)


def test_words_are_encoded_one_by_one_without_silent_ids() -> None:
    def encode(word: str) -> list[int]:
        return [EPAD if ch == "?" else 10 + ord(ch) - ord("a") for ch in word]

    assert words(encode, "  ab\tc ? ", frozenset({PAD, EPAD})) == [[10, 11], [12]]


def test_a_word_is_firm_the_next_waits_for_the_model_to_stop_padding() -> None:
    q = queue()
    assert q.push(1, "c", [[10, 11], [12]])
    assert q.offer() == Offer(10, firm=True)  # an idle queue's first word: at once
    assert q.settle(10, index=0) == []
    assert q.offer() == Offer(11, firm=True)  # the rest of the word
    assert q.settle(11, index=1) == []
    assert q.offer() == Offer(12, firm=False)  # the next: where the model would say a word
    assert q.settle(PAD, index=2) == []
    assert q.offer() == Offer(12, firm=False)
    assert q.settle(12, index=3) == [Taken(1, "c", 3)]
    assert not q and q.offer() is None and q.queued == 0


def test_the_models_end_of_padding_brings_the_next_word_at_the_next_frame() -> None:
    q = queue()
    q.push(0, "c", [[10], [11]])
    q.settle(10, 0)
    assert q.offer() == Offer(11, firm=False)
    q.settle(EPAD, 1)
    assert q.offer() == Offer(11, firm=True)


def test_a_model_that_only_pads_gets_the_next_word_after_the_budget() -> None:
    q = queue()
    q.push(0, "c", [[10], [11]])
    q.settle(10, 0)
    for i in range(PAD_BUDGET):
        assert q.offer() == Offer(11, firm=False)
        q.settle(PAD, 1 + i)
    assert q.offer() == Offer(11, firm=True)


def test_contexts_follow_one_another_and_an_emptied_queue_is_idle_again() -> None:
    q = queue()
    q.push(0, "a", [[10]])
    q.push(0, "b", [])
    q.push(0, "c", [[11]])
    assert q.settle(10, 7) == [Taken(0, "a", 7), Taken(0, "b", 7)]
    assert q.offer() == Offer(11, firm=False)  # c's word follows a's, paced
    assert q.settle(11, 8) == [Taken(0, "c", 8)]
    q.push(0, "d", [[12]])
    assert q.offer() == Offer(12, firm=True)


def test_the_bound_counts_what_waits_and_refuses_a_context_whole() -> None:
    q = queue(limit=3)
    assert q.push(0, "a", [[10, 11]])
    assert not q.push(0, "b", [[12], [13]])
    assert q.queued == 2
    assert q.push(0, "c", [[12]])
    q.settle(10, 0)
    assert q.queued == 2


def test_nothing_to_say_on_an_empty_queue_is_not_queued() -> None:
    with pytest.raises(ValueError):
        queue().push(0, "empty", [])
