"""The `synthetic` stage0 backend: real VAD and end-of-turn model, scripted ASR and LLM on a clock.

For load and fault tests of the serving path only; never the default. The
scripted answer quotes the last user message, so a test can see which
history the prompt was built from without a real model. Guided to a
function call (tools.py: `tool_choice` "required" or a named function), it
calls the first function allowed, with no arguments.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from antiphon.common import stage_audio
from antiphon.stage0.assets import locate_turn, locate_vad
from antiphon.stage0.generation import GenerationMetrics, Guided, LlmOutput
from antiphon.stage0.settings import Stage0Settings
from antiphon.stage0.turn import SmartTurn
from antiphon.stage0.vad import SileroVad

BYTES_PER_MS = stage_audio.BYTES_PER_MS
Json = dict[str, Any]


class ScriptedLlm:
    """Answers `You said: <last user text>.` one word per `token_ms`."""

    def __init__(self, *, ttft_ms: float, token_ms: float) -> None:
        self._ttft_s = ttft_ms / 1000
        self._token_s = token_ms / 1000

    def build_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        return "".join(f"<{role}>{content}\n" for role, content in messages) + "<assistant>"

    def count_tokens(self, prompt: str) -> int:
        return len(prompt.split())

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
        for i, word in enumerate(words):
            if i:
                t = time.perf_counter()
                await asyncio.sleep(self._token_s)
                itl.append((time.perf_counter() - t) * 1000)
            yield LlmOutput(text=("" if i == 0 else " ") + word, finished=False)
        metrics = GenerationMetrics(
            ttft_ms=ttft,
            tpot_ms=sum(itl) / len(itl) if itl else 0.0,
            itl_ms=itl,
            num_prompt_tokens=len(prompt.split()),
            num_generation_tokens=len(words),
        )
        yield LlmOutput(text="", finished=True, finish_reason="stop", metrics=metrics)


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
        self._llm = ScriptedLlm(
            ttft_ms=settings.synthetic_ttft_ms, token_ms=settings.synthetic_token_ms
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
