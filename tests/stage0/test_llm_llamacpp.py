"""llama.cpp's engine beyond the contract both engines keep (test_llm.py): guided
output through llama.cpp grammars, the yes/no odds, answers batched together,
and the prefix a session's next turn finds cached."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from antiphon.stage0.assets import prepare
from antiphon.stage0.backends.cascade.llm.generation import Guided, LlmOutput
from antiphon.stage0.settings import Stage0Settings

if TYPE_CHECKING:
    from antiphon.stage0.backends.cascade.llm.llm_llamacpp import LlamaCppEngine

pytestmark = pytest.mark.models

SYSTEM = "You are a helpful assistant. Answer briefly."


@pytest.fixture(scope="module")
async def engine(model_cache: Path) -> AsyncIterator[LlamaCppEngine]:
    """llama.cpp's engine, whichever the worker picks on this CPU."""
    from antiphon.stage0.backends.cascade.llm.cpu_choice import choose_for
    from antiphon.stage0.backends.cascade.llm.llm_llamacpp import LlamaCppEngine
    from antiphon.stage0.backends.cascade.models import start_llm

    settings = Stage0Settings()
    assets = prepare(model_cache, settings.llm_model, "llamacpp")
    own = await start_llm(settings, choose_for(settings, engine="llamacpp"), assets.llm_model)
    assert isinstance(own, LlamaCppEngine)
    try:
        yield own
    finally:
        await own.shutdown()


async def _answer(
    engine: LlamaCppEngine, prompt: str, max_tokens: int, guided: Guided | None = None
) -> tuple[str, LlmOutput]:
    text = ""
    async for out in engine.generate(
        f"test-{uuid.uuid4().hex[:8]}",
        prompt,
        temperature=0.0,
        max_tokens=max_tokens,
        guided=guided,
    ):
        text += out.text
    return text, out


async def test_a_json_schema_holds_the_answer_to_it(engine: LlamaCppEngine) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    }
    prompt = engine.build_prompt(
        [("system", SYSTEM), ("user", "Call the weather function for Paris in celsius.")]
    )
    text, last = await _answer(engine, prompt, 40, Guided(json_schema=schema))
    call = json.loads(text)
    assert set(call) == {"city", "unit"}
    assert call["unit"] in {"celsius", "fahrenheit"}
    assert "paris" in call["city"].lower()
    assert last.finish_reason == "stop"


async def test_a_choice_is_answered_with_one_of_its_words(engine: LlamaCppEngine) -> None:
    prompt = engine.build_prompt([("system", SYSTEM), ("user", "Is fire hot or cold?")])
    text, _ = await _answer(engine, prompt, 8, Guided(choice=("hot", "cold")))
    assert text == "hot"


async def test_the_first_token_s_odds_say_yes_or_no(engine: LlamaCppEngine) -> None:
    ask = "Answer yes or no."
    yes = await engine.first_token_odds(
        "odds-yes",
        engine.build_prompt([("system", ask), ("user", "Is Paris in France?")]),
        ["yes", "no"],
    )
    no = await engine.first_token_odds(
        "odds-no",
        engine.build_prompt([("system", ask), ("user", "Is Paris in Japan?")]),
        ["yes", "no"],
    )
    assert yes["yes"] > 0.8 > yes["no"]
    assert no["no"] > 0.8 > no["yes"]


async def test_answers_at_once_are_each_right(engine: LlamaCppEngine) -> None:
    """Decoded together in one batch per step, neither answer takes the other's tokens."""
    questions = {
        "What is the capital of France?": "paris",
        "How many legs does a spider have?": "eight",
    }
    answers = await asyncio.gather(
        *(
            _answer(engine, engine.build_prompt([("system", SYSTEM), ("user", q)]), 16)
            for q in questions
        )
    )
    for (text, _), word in zip(answers, questions.values(), strict=True):
        assert word in text.lower().replace("8", "eight")


async def test_a_session_s_next_turn_finds_its_prompt_cached_after_another_s(
    engine: LlamaCppEngine,
) -> None:
    """Turn 2's prompt is turn 1's and more: only the new text is prefilled,
    even after another session's request ran in between."""
    first = [("system", f"{SYSTEM} Session {uuid.uuid4().hex}."), ("user", "Say hello.")]
    prompt1 = engine.build_prompt(first)
    text1, out1 = await _answer(engine, prompt1, 8)
    other = engine.build_prompt([("system", "You are a poet."), ("user", "A word for sea?")])
    await _answer(engine, other, 4)
    prompt2 = engine.build_prompt([*first, ("assistant", text1), ("user", "And goodbye?")])
    _, out2 = await _answer(engine, prompt2, 4)
    assert out1.metrics is not None and out2.metrics is not None
    assert out1.metrics.num_cached_tokens < engine.count_tokens(prompt1) // 2
    assert out2.metrics.num_cached_tokens >= engine.count_tokens(prompt1) - 1
