"""History fits the context: oldest turns leave first, in chunks that keep the prefix stable;
the instructions and the latest turn always stay."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from antiphon.stage0.backends.cascade.llm.history import (
    HistoryTooLongError,
    Message,
    fit,
    fit_prompt,
)

SYSTEM: Message = ("system", "be brief " * 10)  # 20 tokens


def words(message: Message) -> int:
    return len(message[1].split())


def turn(i: int, size: int = 10) -> list[Message]:
    """A user message and its answer, `size` tokens each, numbered so none are equal."""
    return [("user", f"q{i} " + "w " * (size - 1)), ("assistant", f"a{i} " + "w " * (size - 1))]


def conversation(turns: int, size: int = 10) -> list[Message]:
    return [SYSTEM] + [m for i in range(turns) for m in turn(i, size)]


def asking(history: list[Message], i: int, size: int = 10) -> list[Message]:
    """The prompt of turn `i`: the history, then its user message."""
    return [*history, turn(i, size)[0]]


def total(messages: Sequence[Message]) -> int:
    return sum(words(m) for m in messages)


def test_a_history_that_fits_is_kept_whole() -> None:
    messages = asking(conversation(5), 5)
    assert fit(messages, words, budget=total(messages)) == messages


def test_an_overflow_drops_whole_oldest_turns_down_to_the_retained_share() -> None:
    messages = asking(conversation(20), 20)  # 20 + 20*20 + 10 = 430 tokens
    kept = fit(messages, words, budget=300, retention_ratio=0.5)
    assert kept[0] == SYSTEM
    assert kept[-1] == messages[-1]
    # A suffix of the history, starting at a user message.
    assert kept[1][0] == "user" and kept[1:] == messages[-(len(kept) - 1) :]
    # The replay cut at the first overflow and again later, each time to <= 50% of the room.
    assert total(kept) - words(SYSTEM) <= 300 - 20


def test_the_kept_prefix_stays_the_same_between_cuts() -> None:
    """Each prompt extends the previous one (prefix cache warm) except at a few cuts."""
    history = conversation(0)
    previous: list[Message] = []
    cuts = 0
    for i in range(200):
        prompt = fit(asking(history, i), words, budget=400, retention_ratio=0.8)
        assert total(prompt) <= 400
        assert prompt[0] == SYSTEM and prompt[-1] == turn(i)[0]
        if previous and prompt[: len(previous) - 1] != previous[:-1]:
            cuts += 1
        previous = prompt
        history += turn(i)
    # 400 tokens hold ~19 turns; cutting to 80% frees ~4, so a cut every ~5 turns (37
    # here), where cutting only what must go (ratio 1) changes the prefix every turn (181).
    assert cuts <= 50


def test_a_ratio_of_one_cuts_only_what_it_must() -> None:
    messages = asking(conversation(30), 30)
    kept = fit(messages, words, budget=200, retention_ratio=1.0)
    # Room 180 tokens: the latest user message and the 8 whole turns before it.
    assert total(kept) - words(SYSTEM) == 10 + 8 * 20


def test_disabled_returns_everything_even_when_it_does_not_fit() -> None:
    messages = asking(conversation(30), 30)
    assert fit(messages, words, budget=100, retention_ratio=0.0) == messages


def test_what_follows_the_latest_user_message_stays_with_it() -> None:
    tail: list[Message] = [
        ("user", "what is the weather " * 2),
        ("assistant", "calling weather"),
        ("user", "ok"),  # the latest user message
        ("tool", "sunny " * 5),
    ]
    messages = [*conversation(20), *tail]
    kept = fit(messages, words, budget=60, retention_ratio=0.8)
    assert kept[0] == SYSTEM
    assert kept[-2:] == tail[-2:]


def test_a_latest_turn_that_cannot_fit_is_an_error_that_says_so() -> None:
    messages = [*conversation(3), ("user", "long " * 500)]
    with pytest.raises(HistoryTooLongError) as caught:
        fit(messages, words, budget=300)
    assert caught.value.budget == 300 and caught.value.tokens == 20 + 500


def test_a_conversation_without_a_system_message_keeps_its_latest_turn() -> None:
    messages = asking(conversation(20)[1:], 20)
    kept = fit(messages, words, budget=100)
    assert kept[0][0] == "user" and kept[-1] == messages[-1] and total(kept) <= 100


def render(messages: Sequence[Message]) -> str:
    """A template that wraps each message and, like a tools block, adds 30 tokens to the system."""
    out = []
    for role, content in messages:
        extra = " tool" * 30 if role == "system" else ""
        out.append(f"<{role}> {content}{extra} </{role}>")
    return " ".join(out) + " <assistant>"


def count(text: str) -> int:
    return len(text.split())


def test_fit_prompt_sends_the_whole_history_when_it_fits() -> None:
    messages = asking(conversation(3), 3)
    assert fit_prompt(
        messages, render, count, max_model_len=2048, reserve=128, retention_ratio=0.8
    ) == render(messages)


@pytest.mark.parametrize("ratio", [0.5, 0.8, 1.0])
def test_fit_prompt_leaves_the_reserve_free_counting_what_the_template_adds(ratio: float) -> None:
    messages = asking(conversation(60), 60)
    prompt = fit_prompt(
        messages, render, count, max_model_len=512, reserve=128, retention_ratio=ratio
    )
    assert count(prompt) <= 512 - 128
    assert prompt.startswith(f"<system> {SYSTEM[1]}") and "q60" in prompt and "q0 " not in prompt


def test_fit_prompt_disabled_sends_everything() -> None:
    messages = asking(conversation(60), 60)
    assert fit_prompt(
        messages, render, count, max_model_len=512, reserve=128, retention_ratio=0.0
    ) == render(messages)
