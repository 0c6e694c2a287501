"""The synthetic backend's scripted LLM: its words, paced after each read or on one step
clock for all generations, where a reader that falls behind gets what it missed at once."""

from __future__ import annotations

import asyncio
import time

from antiphon.stage0.backends.cascade.llm.generation import LlmOutput
from antiphon.stage0.backends.synthetic.engines import ScriptedLlm, StepClock

QUESTION = " ".join(f"w{i}" for i in range(40))
PROMPT = f"<system>Repeat.\n<user>{QUESTION}\n<assistant>"
WORDS = 30
SCRIPT = f"You said: {QUESTION}".split(" ")[:WORDS]


async def answer(llm: ScriptedLlm, *, read_s: float = 0.0) -> list[LlmOutput]:
    """One generation's outputs, each taken `read_s` after the last."""
    outs = []
    async for out in llm.generate("r", PROMPT, temperature=0.0, max_tokens=WORDS):
        outs.append(out)
        if not out.finished:
            await asyncio.sleep(read_s)
    return outs


async def timed(llm: ScriptedLlm, *, read_s: float = 0.0) -> tuple[list[LlmOutput], float]:
    """`answer`, and when it ended."""
    outs = await answer(llm, read_s=read_s)
    return outs, time.perf_counter()


def said(outs: list[LlmOutput]) -> list[str]:
    return "".join(o.text for o in outs).split(" ")


async def test_paced_after_each_read_every_word_is_a_delta() -> None:
    outs = await answer(ScriptedLlm(ttft_ms=0, token_ms=1))
    assert said(outs) == SCRIPT
    assert len(outs) == WORDS + 1
    assert outs[-1].finished and outs[-1].metrics is not None
    assert outs[-1].metrics.num_generation_tokens == WORDS


async def test_on_a_step_clock_a_late_reader_gets_the_missed_words_together() -> None:
    # 20 ms steps: on a loaded 2-core box a reader that keeps up can still miss a 5 ms one.
    step_s = 0.02
    llm = ScriptedLlm(ttft_ms=0, token_ms=step_s * 1000, clock=StepClock(step_s))
    (keeping_up, ended), (late, late_ended) = await asyncio.gather(
        timed(llm), timed(llm, read_s=3 * step_s)
    )
    assert said(keeping_up) == said(late) == SCRIPT
    # Read every third step, it came in about a third as many deltas as one that kept up.
    assert len(late) < WORDS // 2 < 3 * WORDS // 4 < len(keeping_up)
    # It ended with the other, not (as paced after each read) 2 x 30 steps later.
    assert late_ended - ended < WORDS * step_s
    m = late[-1].metrics
    assert m is not None and m.num_generation_tokens == WORDS and len(m.itl_ms) == WORDS - 1


async def test_the_clock_stops_when_no_generation_runs() -> None:
    clock = StepClock(0.001)
    await answer(ScriptedLlm(ttft_ms=0, token_ms=1, clock=clock))
    await asyncio.sleep(0.01)
    steps = clock.steps
    await asyncio.sleep(0.01)
    assert clock.steps == steps
