"""A session that lasts: far more history than the model's context holds.

The Redis history keeps every item; the prompt keeps the instructions and the
latest turns, the oldest leaving first (OpenAI's `truncation: "auto"`). Text
turns with short answers, so 200 of them fit in a test run with the real
model on a small CPU.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from stack import LocalStack

from tests.support.history import stored_items
from tests.support.realtime import MANUAL, Event, RealtimeClient, duplex_url, of_type

pytestmark = [pytest.mark.stack, pytest.mark.models]

TURNS = 200


async def _turn(client: RealtimeClient, text: str, **response: Any) -> Event:
    await client.send(
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    )
    await client.send(
        "response.create",
        response={"output_modalities": ["text"], "max_output_tokens": 6, **response},
    )
    cycle = await client.response_cycle(timeout=120)
    return of_type(cycle, "response.done")[0]["response"]


async def test_two_hundred_text_turns_all_complete_and_history_keeps_them(
    model_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(duplex_url(model_stack.ports.gateway))
    try:
        created = await client.open(**MANUAL, extra_body={"return_stage_metrics": True})
        statuses: list[str] = []
        prompt_tokens: list[int] = []
        for n in range(TURNS):
            done = await _turn(client, f"Turn {n}: tell me one short fact about the number {n}.")
            statuses.append(done["status"])
            prompt_tokens.append(done["metadata"]["stage_metrics"]["num_prompt_tokens"])
        assert statuses == ["completed"] * TURNS, [
            (n, s) for n, s in enumerate(statuses) if s != "completed"
        ]
        assert not of_type(client.events, "error")
        # Old turns left the prompt (it shrank at a cut) and it never outgrew the context.
        assert any(later < earlier for earlier, later in itertools.pairwise(prompt_tokens))
        assert max(prompt_tokens) < 2048
        items = await stored_items(model_stack.redis_url, created["session"]["id"])
        assert len([i for i in items if i.role == "user"]) == TURNS
    finally:
        await client.close()


async def test_a_turn_too_long_for_the_context_fails_alone_and_the_session_goes_on(
    model_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(duplex_url(model_stack.ports.gateway))
    try:
        await client.open(**MANUAL)
        huge = " ".join(["word"] * 6000)
        failed = await _turn(client, huge)
        assert failed["status"] == "failed", failed
        assert failed["status_details"]["reason"], failed
        after = await _turn(client, "Say hello.")
        assert after["status"] == "completed", after
    finally:
        await client.close()
