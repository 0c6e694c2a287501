"""The loop stop ends a response once it repeats itself, and never a response that does not."""

from __future__ import annotations

import itertools

import pytest

from antiphon.stage0.backends.cascade.llm.repetition import LoopGuard


def _first_loop(guard: LoopGuard, tokens: list[int], step: int = 1) -> int | None:
    """How many tokens were fed (`step` at a time, as deltas come) when it said "looping"."""
    for i in range(0, len(tokens), step):
        if guard.feed(tokens[i : i + step]):
            return min(i + step, len(tokens))
    return None


def test_a_repeated_sentence_is_stopped_as_its_ngram_comes_round_again() -> None:
    sentence = list(range(100, 120))  # a 20-token sentence, said over and over
    stream = sentence * 5
    # 12-grams: the first one recurs at token 20 + 12.
    assert _first_loop(LoopGuard(12, 2), stream) == 32


@pytest.mark.parametrize("period", [1, 2, 5])
def test_a_stutter_shorter_than_the_ngram_is_stopped_too(period: int) -> None:
    stream = [7, 8, 9, *itertools.islice(itertools.cycle(range(period)), 60)]
    # After the lead-in, one n-gram of the cycle comes round again a period later.
    assert _first_loop(LoopGuard(12, 2), stream) == 3 + 12 + period


def test_more_repeats_wait_for_more_cycles() -> None:
    stream = list(range(10)) * 6
    assert _first_loop(LoopGuard(4, 3), stream) == 2 * 10 + 4


def test_output_without_a_repeated_ngram_runs_to_its_end() -> None:
    # Words recur (token 1 every other place) but no 4-gram does.
    stream = [t for i in range(200) for t in (1, 1000 + i)]
    guard = LoopGuard(4, 2)
    assert _first_loop(guard, stream) is None and not guard.looping


def test_deltas_of_several_tokens_are_seen_whole() -> None:
    stream = list(range(30)) * 3
    # Merged deltas (a slow consumer) still stop at the delta that closes the loop.
    assert _first_loop(LoopGuard(12, 2), stream, step=7) == 42


def test_once_looping_it_stays_looping() -> None:
    guard = LoopGuard(2, 2)
    assert guard.feed([1, 2, 1, 2])
    assert guard.feed([99]) and guard.looping


def test_ngram_zero_is_off() -> None:
    assert _first_loop(LoopGuard(0, 2), [5] * 1000) is None


@pytest.mark.parametrize(("ngram", "repeats"), [(-1, 2), (4, 1)])
def test_nonsense_settings_are_refused(ngram: int, repeats: int) -> None:
    with pytest.raises(ValueError):
        LoopGuard(ngram, repeats)
