"""The `synthetic` stage0 backend: real VAD and end-of-turn model, scripted ASR and LLM on a clock.

For load and fault tests of the serving path only; never the default. The
scripted answer quotes the last user message, so a test can see which
history the prompt was built from without a real model. Guided to a
function call (tools.py: `tool_choice` "required" or a named function), it
calls the first function allowed, with no arguments.

Its words come one per `token_ms` after the last was taken, or, with a
`StepClock` (`synthetic_step_clock`), on one clock for every generation, as
a batching engine's do: a reader that falls behind then gets what it missed
merged into one delta, as vLLM's are, and its lag slows no generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from typing import Any

from antiphon.common import stage_audio
from antiphon.stage0.assets import locate_turn, locate_vad
from antiphon.stage0.backends.cascade.listening.turn import SmartTurn
from antiphon.stage0.backends.cascade.listening.vad import SileroVad
from antiphon.stage0.backends.cascade.llm.generation import GenerationMetrics, Guided, LlmOutput
from antiphon.stage0.settings import Stage0Settings

BYTES_PER_MS = stage_audio.BYTES_PER_MS
Json = dict[str, Any]


class StepClock:
    """Decode steps every `step_s` for all generations at once, while any runs;
    steps missed while the event loop was busy are counted, not made up."""

    def __init__(self, step_s: float) -> None:
        self._step_s = step_s
        self.steps = 0
        self._running = 0
        self._waiting: list[asyncio.Future[None]] = []
        self._ticker: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """A generation's time on the clock: it ticks while one runs."""
        self._running += 1
        if self._ticker is None:
            self._ticker = asyncio.create_task(self._tick())
        try:
            yield
        finally:
            self._running -= 1

    async def next_step(self) -> None:
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append(fut)
        await fut

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        start, ticks = loop.time(), 0
        try:
            while self._running:
                await asyncio.sleep(max(0.0, start + (ticks + 1) * self._step_s - loop.time()))
                passed = max(ticks + 1, int((loop.time() - start) / self._step_s))
                self.steps += passed - ticks
                ticks = passed
                waiting, self._waiting = self._waiting, []
                for fut in waiting:
                    if not fut.done():
                        fut.set_result(None)
        finally:
            self._ticker = None


class ScriptedLlm:
    """Answers `You said: <last user text>.` one word per `token_ms` (per step of `clock`)."""

    def __init__(self, *, ttft_ms: float, token_ms: float, clock: StepClock | None = None) -> None:
        self._ttft_s = ttft_ms / 1000
        self._token_s = token_ms / 1000
        self._clock = clock

    def build_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        return "".join(f"<{role}>{content}\n" for role, content in messages) + "<assistant>"

    def count_tokens(self, prompt: str) -> int:
        return len(prompt.split())

    def prepare(self, role: str, content: str) -> None:
        pass  # its prompts are never encoded: nothing to make ready

    @property
    def takes_tools(self) -> bool:
        return False

    def render_chat(self, messages: Sequence[Json], tools: Sequence[Json] | None = None) -> str:
        return self.build_prompt([(m["role"], m["content"]) for m in messages])

    async def first_token_odds(
        self, request_id: str, prompt: str, options: Sequence[str]
    ) -> dict[str, float]:
        # It never starts a call by itself, so nothing asks.
        return dict.fromkeys(options, 0.0)

    async def generate(
        self,
        request_id: str,
        prompt: str,
        *,
        temperature: float,
        max_tokens: int,
        guided: Guided | None = None,
    ) -> AsyncGenerator[LlmOutput, None]:
        """The scripted words; held to a call's schema (tools.py), a call of the
        first function it allows, with no arguments."""
        users = [line[len("<user>") :] for line in prompt.splitlines() if line.startswith("<user>")]
        heard = users[-1] if users else "nothing"
        words = f"You said: {heard.rstrip('.')}. Thank you.".split(" ")[:max_tokens]
        if guided is not None:
            words = [_guided_answer(guided)]
        t0 = time.perf_counter()
        await asyncio.sleep(self._ttft_s)
        ttft = (time.perf_counter() - t0) * 1000
        itl: list[float] = []
        if self._clock is None:
            for i, word in enumerate(words):
                if i:
                    t = time.perf_counter()
                    await asyncio.sleep(self._token_s)
                    itl.append((time.perf_counter() - t) * 1000)
                yield LlmOutput(text=("" if i == 0 else " ") + word, finished=False)
        else:
            async for text in _on_clock(self._clock, words, itl):
                yield LlmOutput(text=text, finished=False)
        metrics = GenerationMetrics(
            ttft_ms=ttft,
            tpot_ms=sum(itl) / len(itl) if itl else 0.0,
            itl_ms=itl,
            num_prompt_tokens=len(prompt.split()),
            num_generation_tokens=len(words),
        )
        yield LlmOutput(text="", finished=True, finish_reason="stop", metrics=metrics)


async def _on_clock(
    clock: StepClock, words: list[str], itl: list[float]
) -> AsyncGenerator[str, None]:
    """`words` as deltas: the first at once, then one more each step of `clock`,
    those of steps the reader missed together; their gaps into `itl`."""
    first = seen = clock.steps
    sent, last = 0, time.perf_counter()
    with clock.running():
        while sent < len(words):
            if sent and clock.steps == seen:
                await clock.next_step()
            seen = clock.steps
            due = min(len(words), 1 + seen - first)
            t = time.perf_counter()
            if sent:
                itl.extend([(t - last) * 1000 / (due - sent)] * (due - sent))
            yield ("" if sent == 0 else " ") + " ".join(words[sent:due])
            sent, last = due, t


def _guided_answer(guided: Guided) -> str:
    if guided.choice:
        return guided.choice[0]
    schema = guided.json_schema or {}
    first = (schema.get("anyOf") or [schema])[0]
    name = first.get("properties", {}).get("name", {}).get("const", "")
    return json.dumps({"name": name, "arguments": {}})


class SyntheticEngines:
    def __init__(self, settings: Stage0Settings) -> None:
        self._vad = SileroVad(locate_vad(), threads=settings.vad_threads)
        turn = locate_turn()
        self._turn = SmartTurn(turn.onnx, turn.features, threads=settings.turn_threads)
        token_ms = settings.synthetic_token_ms
        self._llm = ScriptedLlm(
            ttft_ms=settings.synthetic_ttft_ms,
            token_ms=token_ms,
            clock=StepClock(token_ms / 1000) if settings.synthetic_step_clock else None,
        )
        self._asr_s = settings.synthetic_asr_ms / 1000

    @property
    def vad(self) -> SileroVad:
        return self._vad

    @property
    def turn(self) -> SmartTurn:
        return self._turn

    @property
    def llm(self) -> ScriptedLlm:
        return self._llm

    async def transcribe(self, pcm16: bytes) -> str:
        await asyncio.sleep(self._asr_s)
        return f"synthetic utterance of {len(pcm16) // BYTES_PER_MS} milliseconds"

    async def close(self) -> None:
        return None
