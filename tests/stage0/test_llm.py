"""The LLM engine a worker picks on this machine (cpu_choice.py: llama.cpp on
an AVX2 CPU, vLLM on AVX-512 BF16): chat prompts, streamed deltas, metrics,
abort and cancellation, the loop stop, allowed tokens. Both engines keep this
contract; test_llm_vllm.py runs vLLM's own on any CPU."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import aclosing
from pathlib import Path

import pytest

from antiphon.stage0.assets import Stage0Assets
from antiphon.stage0.backends.cascade.llm.generation import LlmOutput, PromptTooLongError
from antiphon.stage0.backends.cascade.models import Llm

pytestmark = pytest.mark.models

SYSTEM = "You are a helpful assistant. Answer briefly."


def _rid() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


async def _collect(engine: Llm, prompt: str, max_tokens: int) -> list[LlmOutput]:
    return [
        out async for out in engine.generate(_rid(), prompt, temperature=0.0, max_tokens=max_tokens)
    ]


async def test_prompt_is_the_chat_template_with_system_first(llm_engine: Llm) -> None:
    prompt = llm_engine.build_prompt([("system", SYSTEM), ("user", "Hi"), ("assistant", "Hello")])
    assert prompt.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>")
    assert prompt.index("Hi") < prompt.index("Hello")
    assert prompt.endswith("<|im_start|>assistant\n")


async def test_answers_a_question_in_streamed_deltas_with_metrics(llm_engine: Llm) -> None:
    prompt = llm_engine.build_prompt(
        [("system", SYSTEM), ("user", "What is the capital of France?")]
    )
    outputs = await _collect(llm_engine, prompt, max_tokens=32)
    text = "".join(o.text for o in outputs)
    assert "paris" in text.lower()
    assert len([o for o in outputs if o.text]) > 1
    assert [o.finished for o in outputs] == [False] * (len(outputs) - 1) + [True]
    last = outputs[-1]
    assert last.finish_reason in {"stop", "length"}
    metrics = last.metrics
    assert metrics is not None
    assert metrics.ttft_ms > 0 and metrics.tpot_ms > 0
    assert metrics.num_prompt_tokens == llm_engine.count_tokens(prompt)
    assert metrics.num_generation_tokens > 1
    assert len(metrics.itl_ms) == metrics.num_generation_tokens - 1
    assert all(x >= 0 for x in metrics.itl_ms)


async def test_greedy_is_deterministic(llm_engine: Llm) -> None:
    prompt = llm_engine.build_prompt([("system", SYSTEM), ("user", "Name three colors.")])
    first = "".join(o.text for o in await _collect(llm_engine, prompt, max_tokens=12))
    second = "".join(o.text for o in await _collect(llm_engine, prompt, max_tokens=12))
    assert first and first == second


async def test_abort_stops_a_long_generation_early(llm_engine: Llm) -> None:
    prompt = llm_engine.build_prompt([("system", SYSTEM), ("user", "Write a very long story.")])
    request_id = _rid()
    outputs: list[LlmOutput] = []
    async for out in llm_engine.generate(request_id, prompt, temperature=0.0, max_tokens=1000):
        outputs.append(out)
        if len(outputs) == 3:
            await llm_engine.abort(request_id)
    last = outputs[-1]
    assert last.finished and last.finish_reason == "abort"
    assert last.metrics is not None and last.metrics.num_generation_tokens < 50
    assert llm_engine.num_active_requests == 0


async def test_cancelling_the_consumer_aborts_the_request(llm_engine: Llm) -> None:
    prompt = llm_engine.build_prompt([("system", SYSTEM), ("user", "Write a very long story.")])
    first_delta = asyncio.Event()

    async def consume() -> None:
        gen = llm_engine.generate(_rid(), prompt, temperature=0.0, max_tokens=1000)
        async with aclosing(gen):
            async for _ in gen:
                first_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), timeout=60)
    assert llm_engine.num_active_requests == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert llm_engine.num_active_requests == 0


async def test_a_prompt_over_max_model_len_is_refused_before_it_starts(
    llm_engine: Llm,
) -> None:
    prompt = llm_engine.build_prompt([("user", "word " * llm_engine.max_model_len)])
    with pytest.raises(PromptTooLongError):
        await _collect(llm_engine, prompt, max_tokens=8)
    assert llm_engine.num_active_requests == 0


async def test_a_response_that_loops_is_stopped_as_repetition(llm_engine: Llm) -> None:
    """The loop stop (the default settings' n-gram guard) ends it long before its limit."""
    prompt = llm_engine.build_prompt(
        [("system", SYSTEM), ("user", "Write the word la 300 times, separated by spaces.")]
    )
    outputs = await _collect(llm_engine, prompt, max_tokens=400)
    last = outputs[-1]
    assert last.finish_reason == "repetition"
    assert last.metrics is not None and last.metrics.num_generation_tokens < 40
    assert llm_engine.num_active_requests == 0


async def test_an_answer_held_to_allowed_tokens_uses_no_other(
    llm_engine: Llm, assets: Stage0Assets
) -> None:
    """`llm_allowed_tokens_file` (bench/gpu/speakable.py): asked for code, the
    model still writes only the allowed words and punctuation."""
    from tokenizers import Tokenizer

    from antiphon.stage0.backends.cascade.llm.generation import Decoding

    tokenizer = Tokenizer.from_file(str(Path(assets.llm_model) / "tokenizer.json"))
    words = (" the", " sun", " is", " blue", " and", ".", ",")
    allowed = tuple(i for w in words for i in tokenizer.encode(w, add_special_tokens=False).ids)
    held = llm_engine.with_decoding(Decoding(allowed_token_ids=allowed))
    prompt = llm_engine.build_prompt(
        [("system", SYSTEM), ("user", "Write a Python function that adds two numbers.")]
    )
    free = "".join(o.text for o in await _collect(llm_engine, prompt, max_tokens=12))
    text = "".join(o.text for o in await _collect(held, prompt, max_tokens=12))
    assert "def" in free or "(" in free  # unheld, it writes code
    assert text and set(text.replace(".", " ").replace(",", " ").split()) <= {
        "the",
        "sun",
        "is",
        "blue",
        "and",
    }
