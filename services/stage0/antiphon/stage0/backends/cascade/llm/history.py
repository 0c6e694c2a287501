"""History cut to fit the model's context, as OpenAI's `truncation` describes.

The session sends the whole conversation every turn (Redis keeps it all);
what does not fit the engine's context leaves the prompt here, oldest turns
first. The system message (stage0's preamble and the client's instructions)
and the latest user turn (that user message and whatever follows it) always
stay.

The cut is made in chunks: when the prompt overflows, enough old turns go at
once to bring the rest down to `retention_ratio` of the budget, and that cut
then holds while the conversation grows into the room it made. Between cuts
each prompt extends the previous one, so vLLM's prefix cache stays warm.

`fit` is a pure function of the messages, so it keeps no per-session state:
it replays the cut over the conversation's earlier turns (each user message
is where a prompt was once made), which lands on the same cut every turn
until the next overflow. The same history gives the same prompt on any
worker, a resumed or failed-over session's included.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

Message = tuple[str, str]
# A chat message's tokens besides its content: ChatML's `<|im_start|>role\n`
# and `<|im_end|>\n` are 5; one more covers a merge at the content's edges.
MESSAGE_OVERHEAD = 6


class HistoryTooLongError(ValueError):
    """Even the system message and the latest user turn alone do not fit."""

    def __init__(self, tokens: int, budget: int) -> None:
        super().__init__(
            f"the instructions and the latest turn need {tokens} tokens; the budget is {budget}"
        )
        self.tokens = tokens
        self.budget = budget


def fit(
    messages: Sequence[Message],
    count_tokens: Callable[[Message], int],
    budget: int,
    retention_ratio: float = 0.8,
) -> list[Message]:
    """The messages to prompt with: all of them if they fit `budget` tokens, else
    the system message, then the newest whole turns (each starting at a user
    message) that fit, cut down to `retention_ratio` of the budget when a cut is due.

    `count_tokens(message)` is one message's share of the prompt. A ratio of 0
    turns cutting off ("disabled"): the messages come back as they are, and the
    engine refuses a prompt that does not fit. Raises `HistoryTooLongError` when
    the pinned messages alone exceed the budget.
    """
    if retention_ratio <= 0:
        return list(messages)
    head = list(messages[:1]) if messages and messages[0][0] == "system" else []
    body = messages[len(head) :]
    room = budget - sum(count_tokens(m) for m in head)
    sums = [0, *itertools.accumulate(count_tokens(m) for m in body)]
    users = [i for i, (role, _) in enumerate(body) if role == "user"]
    # Where a turn may start: at a user message (or anywhere, in a history without one).
    starts = users or list(range(len(body)))
    start = 0
    # The prompts made so far, ending at each user message, then this one.
    for end in [u + 1 for u in users[:-1]] + [len(body)]:
        if sums[end] - sums[start] <= room:
            continue
        # The latest turn of that prompt is kept, so a cut goes no further.
        latest = max((s for s in starts if s < end), default=start)
        candidates = [s for s in starts if start < s <= latest]
        start = _cut(candidates, end, sums, room, retention_ratio, fallback=latest)
    need = sums[-1] - sums[start]
    if need > room:
        raise HistoryTooLongError(budget - room + need, budget)
    return head + list(body[start:])


def _cut(
    candidates: list[int],
    end: int,
    sums: list[int],
    room: int,
    retention_ratio: float,
    *,
    fallback: int,
) -> int:
    """The oldest turn start from which the prompt is down to the retained share,
    else the oldest from which it fits at all, else the latest turn alone."""
    for target in (room * retention_ratio, room):
        for s in candidates:
            if sums[end] - sums[s] <= target:
                return s
    return fallback


def fit_prompt(
    messages: Sequence[Message],
    render: Callable[[Sequence[Message]], str],
    count_tokens: Callable[[str], int],
    *,
    max_model_len: int,
    reserve: int,
    retention_ratio: float,
) -> str:
    """The rendered prompt that leaves `reserve` tokens (the response) of `max_model_len`.

    The whole history when it fits (measured exactly); else `fit` with each
    message costing its content plus `MESSAGE_OVERHEAD`, and the system
    message's cost measured from its own rendering, which holds whatever else the
    template adds (tools, the generation prompt).
    """
    prompt = render(messages)
    budget = max_model_len - reserve
    if retention_ratio <= 0 or count_tokens(prompt) <= budget:
        return prompt
    head = [m for m in messages[:1] if m[0] == "system"]
    head_tokens = count_tokens(render(head)) if head else 0

    def cost(message: Message) -> int:
        if head and message is head[0]:
            return head_tokens
        return count_tokens(message[1]) + MESSAGE_OVERHEAD

    return render(fit(messages, cost, budget, retention_ratio))
