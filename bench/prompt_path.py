"""CPU time of stage0's per-request prompt path, before vLLM gets the request.

    python -m bench.prompt_path [--model FOLDER] [--turns 20] [--sessions 128]

What a stage0 worker does for each `Generate` before the engine sees it
(`Responder._prompt`, then `LlmEngine.generate`): the preamble, the
history fitted to the context (history.fit_prompt: the whole history
rendered with the chat template and counted, and when it does not fit,
counted again message by message, the cut rendered and counted), then the
prompt's ids. Timed two ways, with the default model's real tokenizer:

- before: every count and the final encode run the tokenizer over the whole
  text (the worker up to issue 14's fix);
- after: chat_tokenizer.ChatTokenizer, the worker's path now (each piece
  between added tokens encoded once per worker). "warm" is a session's
  20th turn after its first 19 went through the same worker; "made ready"
  is that turn when the worker also made its new messages (the answer
  before it, the question as heard) ready as it produced them
  (ChatTokenizer.prepare, as cascade.py does); "cold" is the same turn on
  a worker that never saw the session (a resume, a failover).

The history is `--turns` turns of ~90 tokens (about 1.8k tokens at 20),
every session's words its own. At `max_model_len` 4096 it fits whole; at
1536 it is cut (and was at earlier turns: the cut's steady state). Then a
burst: `--sessions` sessions asking at the same instant on one event loop
(`max_model_len` 2048, the default: the history fits), the path run inline
(as the worker does) or in `asyncio.to_thread`; reported: when the last
prompt is ready, the p50/p95 of when each is, and the longest the loop went
without running (what other sessions' streams wait meanwhile).

Measured on the 2-core dev box (Qwen2.5-Coder-1.5B's tokenizer, 20 turns):
3.8-5.8 ms a request before, 0.4-0.5 ms after (warm), 2.5-5.4 ms cold; 128
at once: the last ready after 500 ms before, 52 ms after inline, 78 ms
after in threads (the GIL: a thread only slows the work, though the loop's
longest stall drops from 52 to 8 ms), so the worker builds prompts inline.
Made ready (2026-12-02, same box): 0.53 ms a request warm, 0.33 made ready;
128 at once, the last ready after 74 ms warm, 48 made ready (p50 38, 25).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from transformers import AutoTokenizer

from antiphon.stage0 import history, tool_prompt
from antiphon.stage0.assets import locate
from antiphon.stage0.chat_tokenizer import ChatTokenizer
from antiphon.stage0.prompt import preamble_for, with_preamble
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb

Message = tuple[str, str]
Path_ = Callable[[Sequence[Message], Sequence[cpb.Tool], int], list[int]]
WORDS = (
    "the moon is about three hundred eighty four thousand kilometres from earth and "
    "its light takes a little more than one second to reach us while paris is the "
    "capital of france with two million people living by the river seine today "
    "tomorrow will be sunny with a light wind from the west and twenty degrees"
).split()
TOOLS = [
    cpb.Tool(
        name="get_weather",
        description="The weather in a city.",
        parameters='{"type": "object", "properties": {"city": {"type": "string"}}}',
    ),
    cpb.Tool(name="get_time", description="The time now."),
]


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def conversation(session: int, turns: int) -> list[Message]:
    """The session's instructions and `turns` questions, answered but the last."""
    rng = random.Random(session)
    messages: list[Message] = [("system", f"You are the voice assistant of caller {session}.")]
    for k in range(turns):
        if k:
            messages.append(("assistant", sentence(rng, 55)))
        messages.append(("user", sentence(rng, 18) + " What do you think?"))
    return messages


def prompt_path(
    chat: ChatTokenizer, count: Callable[[str], int], encode: Callable[[str], list[int]]
) -> Path_:
    """Responder._prompt (default settings), then generate's encode: on `count`, `encode`."""
    s = Stage0Settings()

    def run(
        messages: Sequence[Message], offered: Sequence[cpb.Tool], max_model_len: int
    ) -> list[int]:
        prompt = history.fit_prompt(
            with_preamble(
                messages,
                preamble_for(s.llm_preamble, s.llm_style, functions_offered=bool(offered)),
                s.llm_reminder,
            ),
            tool_prompt.renderer(chat, offered),
            count,
            max_model_len=max_model_len,
            reserve=min(s.llm_max_output_tokens, max_model_len // 2),
            retention_ratio=0.8,
        )
        return encode(prompt)

    return run


def per_request_ms(
    path: Path_, sessions: Sequence[list[Message]], offered: Sequence[cpb.Tool], mml: int
) -> float:
    times = []
    for messages in sessions:
        t0 = time.perf_counter()
        path(messages, offered, mml)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def warm(path: Path_, messages: list[Message], offered: Sequence[cpb.Tool], mml: int) -> None:
    """The session's earlier turns through `path` (each ends at a user message)."""
    for end in [i + 1 for i, (role, _) in enumerate(messages[:-1]) if role == "user"]:
        path(messages[:end], offered, mml)


def made_ready(chat: ChatTokenizer, messages: list[Message]) -> None:
    """What the worker does as it produces them: the turn's new messages (the
    answer before the question, and the question as heard) made ready ahead."""
    for role, content in messages[-2:]:
        chat.prepare(role, content)


async def burst(
    path: Path_, sessions: Sequence[list[Message]], mml: int, threaded: bool
) -> dict[str, float]:
    stalls: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            stalls.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()

    async def one(messages: list[Message]) -> float:
        if threaded:
            await asyncio.to_thread(path, messages, (), mml)
        else:
            path(messages, (), mml)
        return (time.perf_counter() - t0) * 1000

    ready = sorted(await asyncio.gather(*(one(m) for m in sessions)))
    stop.set()
    await tick
    return {
        "last_ms": ready[-1],
        "p50_ms": ready[len(ready) // 2],
        "p95_ms": ready[int(len(ready) * 0.95) - 1],
        "max_stall_ms": max(stalls) * 1000,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.prompt_path", description=(__doc__ or "").split("\n\n")[0]
    )
    ap.add_argument("--model", help="a tokenizer folder (default: the prepared default model's)")
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=128)
    args = ap.parse_args()
    s = Stage0Settings()
    folder = args.model or locate(s.model_cache, s.llm_model).llm_model
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    chat = ChatTokenizer.load(folder)

    def whole(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    before = prompt_path(chat, lambda text: len(whole(text)), whole)
    after = prompt_path(chat, chat.count_tokens, chat.encode)
    # The same path on a cache of its own, whose sessions' new messages were made ready.
    readied = ChatTokenizer(tokenizer)
    ready = prompt_path(readied, readied.count_tokens, readied.encode)
    sample = [conversation(i, args.turns) for i in range(32)]
    print(f"{Path(folder).name}, {args.turns} turns: ms per request (median of {len(sample)})")
    print(
        "| max_model_len | tools | tokens sent | before | after, warm | after, made ready"
        " | after, cold |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for mml in (4096, 1536):
        for offered in ((), TOOLS):
            sent = len(before(sample[0], offered, mml))
            # A fresh cache, each session's first request on it.
            fresh = ChatTokenizer(tokenizer)
            cold = prompt_path(fresh, fresh.count_tokens, fresh.encode)
            cold_ms = per_request_ms(cold, sample, offered, mml)
            for messages in sample:
                warm(after, messages, offered, mml)
                warm(ready, messages, offered, mml)
                made_ready(readied, messages)
            ms = [per_request_ms(p, sample, offered, mml) for p in (before, after, ready)]
            print(
                f"| {mml} | {'2' if offered else 'none'} | {sent} | {ms[0]:.2f} | {ms[1]:.2f} "
                f"| {ms[2]:.2f} | {cold_ms:.2f} |"
            )
    print(f"\n{args.sessions} sessions at once, max_model_len 2048, no tools (ms from the burst):")
    print("| path | run | last ready | p50 | p95 | longest loop stall |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    runs = [
        (name, path, threaded)
        for name, path in (("before", before), ("after", after), ("after, made ready", ready))
        for threaded in (False, True)
    ]
    for n, (name, path, threaded) in enumerate(runs):
        # Sessions of their own, their earlier turns seen: each asks a new turn.
        crowd = [conversation(1000 * (n + 1) + i, args.turns) for i in range(args.sessions)]
        for messages in crowd:
            warm(after, messages, (), 2048)
            warm(ready, messages, (), 2048)
            made_ready(readied, messages)
        r = asyncio.run(burst(path, crowd, 2048, threaded))
        print(
            f"| {name} | {'to_thread' if threaded else 'inline'} | {r['last_ms']:.1f} "
            f"| {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['max_stall_ms']:.1f} |"
        )


if __name__ == "__main__":
    main()
