"""The same prompts on vLLM's AsyncLLM in this process (`--raw-vllm`): no worker, no
gRPC, the engine built by the worker's own builder; the worker's TTFT over it."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from antiphon.stage0.backends.cascade.llm.prompt import (
    VOICE_PREAMBLE,
    VOICE_REMINDER,
    with_preamble,
)
from bench.gpu.levels import prefill_by_turn, summarize, turns_at_level
from bench.gpu.sessions import instructions
from bench.lib.machine import MemoryPeaks, now
from bench.lib.questions import RECORDED_QUESTIONS as QUESTIONS
from bench.lib.stats import pct


async def raw_levels(args: argparse.Namespace, llm_model: str) -> list[dict[str, Any]]:
    """The same prompts on vLLM's AsyncLLM in this process, built by the worker's own
    engine-argument builder from the same settings: no worker, no gRPC."""
    from transformers import AutoTokenizer
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import tokens_input
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    from antiphon.stage0.backends.cascade.llm import llm
    from antiphon.stage0.engine_config import EngineConfig
    from antiphon.stage0.settings import Stage0Settings

    s = Stage0Settings()
    config = EngineConfig.of(s)
    target = llm.detected_platform()
    llm._configure_process_env(s.llm_threads or 1, target)
    kwargs = llm.supported_kwargs(llm.engine_kwargs(llm_model, config, target))
    tokenizer = AutoTokenizer.from_pretrained(llm_model, local_files_only=True)
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=[llm._QuietStats])

    def params() -> SamplingParams:
        # One per request, that vLLM may keep (no deep copy): as vLLM's own
        # OpenAI server makes them, and the worker (llm.py).
        return SamplingParams(
            temperature=args.temperature,
            max_tokens=args.max_tokens,
            repetition_penalty=s.llm_repetition_penalty,
            output_kind=RequestOutputKind.DELTA,
            skip_clone=True,
        )

    def prompt_of(messages: list[tuple[str, str]]) -> tuple[str, list[int]]:
        """The prompt and its ids, rendered and encoded before the burst starts."""
        full = with_preamble(
            messages, s.llm_preamble or VOICE_PREAMBLE, s.llm_reminder or VOICE_REMINDER
        )
        prompt = str(
            tokenizer.apply_chat_template(
                [{"role": r, "content": c} for r, c in full],
                tokenize=False,
                add_generation_prompt=True,
            )
        )
        return prompt, tokenizer.encode(prompt, add_special_tokens=False)

    async def one(rid: str, prompt: tuple[str, list[int]], arrived: float) -> dict[str, Any]:
        """One turn whose ids are ready at `arrived`, the start of its burst: the
        worker's clients stamp theirs at that instant too, so both TTFTs hold
        the wait behind the turns handed to vLLM first."""
        handed = time.perf_counter()
        first = last = None
        tokens, text, out = 0, [], None
        async for out in engine.generate(tokens_input(prompt[1], prompt=prompt[0]), params(), rid):
            c = out.outputs[0]
            if c.token_ids:
                last = time.perf_counter()
                tokens += len(c.token_ids)
                text.append(c.text)
                # The first text, as the worker's clients time theirs (a token
                # may decode to nothing yet: a piece of a character).
                if first is None and c.text:
                    first = last
        return {
            "ttft_ms": (first - arrived) * 1000 if first else None,
            # From its own hand-off: the one figure raw runs had before, which
            # left out of every turn but the first the wait behind the others.
            "handoff_ttft_ms": (first - handed) * 1000 if first else None,
            "tpot_ms": (last - first) * 1000 / (tokens - 1)
            if first and last and tokens > 1
            else None,
            "tokens": tokens,
            "answer": "".join(text),
            "completed": tokens > 0,
            "finish": "stop",
            # What the engine prefilled of the prompt: its length less the prefix cache's hit.
            "prompt_tokens": len(prompt[1]),
            "cached_tokens": getattr(out, "num_cached_tokens", None),
        }

    try:
        warmup = prompt_of([("system", instructions(0)), ("user", QUESTIONS[0])])
        await one("warmup", warmup, time.perf_counter())
        levels = []
        for sessions in args.levels:
            turns = turns_at_level(args, sessions)
            history: dict[int, list[tuple[str, str]]] = {i: [] for i in range(sessions)}
            records: list[dict[str, Any]] = []
            started = now()
            with MemoryPeaks() as gpu:
                for k in range(turns):
                    # Turn k of session i: the text Whisper would have heard, with its history.
                    users = [("user", QUESTIONS[(i + k) % len(QUESTIONS)]) for i in range(sessions)]
                    prompts = [
                        prompt_of([("system", instructions(i)), *history[i], users[i]])
                        for i in range(sessions)
                    ]
                    # Every turn of the burst arrives now, as the worker's do at its barrier.
                    arrived = time.perf_counter()
                    answers = await asyncio.gather(
                        *(
                            one(f"raw-{sessions}-{i}-{k}", prompts[i], arrived)
                            for i in range(sessions)
                        )
                    )
                    for i, r in enumerate(answers):
                        history[i] += [users[i], ("assistant", r["answer"].strip())]
                        records.append(r | {"session": i, "turn": k})
            level = summarize(sessions, turns, records)
            handoff = [r["handoff_ttft_ms"] for r in records if r.get("handoff_ttft_ms")]
            level["handoff_ttft_ms"] = {"p50": pct(handoff, 50), "p95": pct(handoff, 95)}
            level["prefill_tokens_by_turn"] = prefill_by_turn(records)
            for key in (
                "asr_ms",
                "asr_ms_p95",
                "stage_ttft_ms",
                "ttft_over_engine_ms",
                "empty_transcripts",
                "sample",
            ):
                level.pop(key, None)
            level["wall_s"] = round(now() - started, 1)
            level["gpu_memory_mib"] = gpu.peak_mib
            levels.append(level)
            t = level["ttft_ms"]
            print(
                f"raw N={sessions:>4} ttft p50/p95 {t['p50']}/{t['p95']} ms"
                f" (from its hand-off {level['handoff_ttft_ms']['p50']}"
                f"/{level['handoff_ttft_ms']['p95']})"
                f" tpot {level['tpot_ms']['p50']} ms"
                f" completed {level['completed']}/{level['expected']}"
                f" prefill by turn {level['prefill_tokens_by_turn']}",
                flush=True,
            )
        return levels
    finally:
        engine.shutdown()


def ratio(worker: list[dict[str, Any]], raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_n = {lv["sessions"]: lv for lv in raw}
    out = []
    for lv in worker:
        r = by_n.get(lv["sessions"])
        if r is None:
            continue
        entry: dict[str, Any] = {"sessions": lv["sessions"]}
        for q in ("p50", "p95"):
            a, b = lv["ttft_ms"][q], r["ttft_ms"][q]
            entry[f"ttft_{q}_worker_over_raw"] = round(a / b, 2) if a and b else None
        out.append(entry)
    return out
