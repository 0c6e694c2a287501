"""Spoken questions answered by the real stack: correct, brief, and how soon heard.

    python -m bench.answers                        # the default model, 1 and 2 sessions
    python -m bench.answers --models qwen2.5-coder-0.5b,qwen2.5-coder-1.5b
    python -m bench.answers --engines llamacpp,vllm    # the LLM's engines, one run

For each model (`ANTIPHON_LLM_MODEL`) it starts a stack of the real models
and asks every question of `bench/fixtures/answers_questions.json` in two voices
(Piper, and espeak-ng's formant speech), each in a fresh duplex session with
the question set's voice-agent instructions (a persona, "keep answers
short"): the audio, a commit, `response.create`. At each level of concurrent
sessions the questions are shared out among that many sessions at once.

An answer is correct when its transcript holds one of the question's
keywords (whole words). It reports accuracy, the answer audio's median
length, commit -> first audio p50/p95 on the client's clock, stage0's TTFT
and TPOT (the engine's clock), and stage0's peak RSS with its engine core.
The target is >= 85% correct with a median answer under 8 s of audio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

import psutil

from antiphon.stage0.backends.cascade.llm.cpu_choice import CpuFeatures
from antiphon.stage0.backends.cascade.llm.llm_models import DEFAULT_LLM
from bench.lib.machine import peak_rss_mib
from bench.lib.realtime import MANUAL, Event, RealtimeClient, audio_bytes, duplex_url, of_type
from bench.lib.results import REPO, RESULTS, command_line, write_json
from bench.lib.speech import VOICES, Voice, spoken
from bench.lib.stats import pct
from deploy.local.stack import LocalStack, Ports

QUESTIONS = REPO / "bench" / "fixtures" / "answers_questions.json"
RATE = 24000
TARGET_ACCURACY = 0.85
TARGET_MEDIAN_S = 8.0


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def correct(answer: str, keywords: list[str]) -> bool:
    text = answer.lower().replace("-", " ")
    return any(re.search(rf"\b{re.escape(k.lower().replace('-', ' '))}\b", text) for k in keywords)


async def session(url: str, instructions: str) -> RealtimeClient:
    """A new session; while the last one's slot is still being freed, tried again."""
    for _ in range(120):
        client = await RealtimeClient.connect(url)
        opened = await client.open(
            **MANUAL, instructions=instructions, extra_body={"return_stage_metrics": True}
        )
        if opened["type"] == "session.created":
            return client
        await client.ws.close()
        await asyncio.sleep(0.5)
    raise RuntimeError(f"no session: {opened}")


async def ask(url: str, instructions: str, item: dict[str, Any], voice: Voice) -> dict[str, Any]:
    """One question in its own session; what was heard, answered, and when."""
    client = await session(url, instructions)
    try:
        await client.append(spoken(item["q"], RATE, voice))
        start = len(client.events)
        t_commit = time.monotonic()
        await client.send("input_audio_buffer.commit")
        await client.send("response.create")
        t_first = None
        while True:
            event = await client.until(
                lambda e: e["type"] in ("response.output_audio.delta", "response.done"), 300
            )
            if event["type"] == "response.done":
                break
            t_first = t_first or time.monotonic()
        events = client.events[start:]
    finally:
        await client.close()
    return result(item, voice, events, t_commit, t_first)


def result(
    item: dict[str, Any], voice: Voice, events: list[Event], t_commit: float, t_first: float | None
) -> dict[str, Any]:
    done = of_type(events, "response.done")[0]["response"]
    stage = done.get("metadata", {}).get("stage_metrics", {})
    heard = of_type(events, "conversation.item.input_audio_transcription.completed")
    said = of_type(events, "response.output_audio_transcript.done")
    answer = said[0]["transcript"] if said else ""
    transcript = heard[0]["transcript"] if heard else ""
    return {
        "question": item["q"],
        "voice": voice,
        "heard": transcript,
        # Whisper heard every word as said: a miss then is the model's alone.
        "heard_right": words(transcript) == words(item["q"]),
        "answer": answer,
        "correct": correct(answer, item["any"]),
        "status": done["status"],
        "answer_audio_s": round(len(audio_bytes(events)) / 2 / RATE, 2),
        "first_audio_ms": round((t_first - t_commit) * 1000, 1) if t_first else None,
        "stage0_ttft_ms": round(stage.get("vllm_ttft_ms", 0.0), 1),
        "stage0_tpot_ms": round(stage.get("vllm_tpot_ms", 0.0), 1),
        "answer_tokens": stage.get("num_generation_tokens", 0),
    }


async def run_level(
    url: str, instructions: str, items: list[tuple[dict[str, Any], Voice]], sessions: int
) -> list[dict[str, Any]]:
    """Every (question, voice), `sessions` of them being answered at any moment."""
    queue: asyncio.Queue[tuple[int, dict[str, Any], Voice]] = asyncio.Queue()
    for i, (item, voice) in enumerate(items):
        queue.put_nowait((i, item, voice))
    results: list[dict[str, Any]] = [{} for _ in items]

    async def worker() -> None:
        while not queue.empty():
            i, item, voice = queue.get_nowait()
            results[i] = await ask(url, instructions, item, voice)
            r = results[i]
            mark = "ok " if r["correct"] else "BAD"
            print(
                f"  {mark} {r['voice']:6} {r['answer_audio_s']:5.1f}s "
                f"{r['first_audio_ms'] or 0:6.0f}ms  {r['heard']!r} -> {r['answer']!r}",
                flush=True,
            )

    await asyncio.gather(*(worker() for _ in range(sessions)))
    return results


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    first = [r["first_audio_ms"] for r in results if r["first_audio_ms"] is not None]
    seconds = [r["answer_audio_s"] for r in results]
    accuracy = sum(r["correct"] for r in results) / len(results)
    heard = [r for r in results if r["heard_right"]]
    median_s = statistics.median(seconds)
    by_voice = {
        v: f"{sum(r['correct'] for r in results if r['voice'] == v)}"
        f"/{sum(r['voice'] == v for r in results)}"
        for v in sorted({r["voice"] for r in results})
    }
    return {
        "answers": len(results),
        "accuracy": round(accuracy, 3),
        "correct_by_voice": by_voice,
        # The model's own share: of the questions Whisper heard word for word.
        "heard_right": len(heard),
        "accuracy_heard_right": round(sum(r["correct"] for r in heard) / max(1, len(heard)), 3),
        "not_completed": sum(r["status"] != "completed" for r in results),
        "answer_audio_s": {"median": round(median_s, 2), "max": max(seconds)},
        "first_audio_ms": {"p50": pct(first, 50, 1) or 0.0, "p95": pct(first, 95, 1) or 0.0},
        "stage0_ttft_ms_p50": round(statistics.median(r["stage0_ttft_ms"] for r in results), 1),
        "stage0_tpot_ms_p50": round(statistics.median(r["stage0_tpot_ms"] for r in results), 1),
        "target_met": accuracy >= TARGET_ACCURACY and median_s < TARGET_MEDIAN_S,
    }


def stage0_peak_rss_mib(stack: LocalStack) -> dict[str, float]:
    """The worker and each process under it (vLLM's engine core, which a worker
    thread starts) at its own peak (VmHWM), and their sum."""
    root = psutil.Process(stack.procs["stage0"].pid)
    peaks = {}
    for proc in [root, *root.children(recursive=True)]:
        peaks[f"{proc.name()} {proc.pid}"] = round(peak_rss_mib(proc.pid), 1)
    return {**peaks, "total": round(sum(peaks.values()), 1)}


def bench_model(
    model: str, engine: str, levels: list[int], questions: dict[str, Any], voices: list[Voice]
) -> dict[str, Any]:
    """`model` on `engine` (`llm_engine`: auto, vllm or llamacpp) at each level."""
    env = {"ANTIPHON_LLM_MODEL": model, "ANTIPHON_LLM_ENGINE": engine}
    stack = LocalStack(ports=Ports.free(), extra_env=env)
    print(f"{model} on {engine}: starting the stack (logs in {stack.run_dir}) ...", flush=True)
    items = [(item, voice) for voice in voices for item in questions["questions"]]
    report: dict[str, Any] = {"model": model, "engine": engine, "levels": {}}
    try:
        t0 = time.monotonic()
        stack.start(timeout_s=900)
        report["startup_s"] = round(time.monotonic() - t0, 1)
        url = duplex_url(stack.ports.gateway)
        for n in levels:
            print(f"{model}: {len(items)} questions, {n} session(s) at a time", flush=True)
            results = asyncio.run(run_level(url, questions["instructions"], items, n))
            report["levels"][str(n)] = {"summary": summary(results), "answers": results}
            print(json.dumps({"model": model, "sessions": n, **summary(results)}), flush=True)
        report["stage0_peak_rss_mib"] = stage0_peak_rss_mib(stack)
    finally:
        stack.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.answers", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--models", default=DEFAULT_LLM, help="llm_model values, comma-separated")
    parser.add_argument(
        "--engines",
        default="auto",
        help="llm_engine values (auto, vllm, llamacpp), comma-separated",
    )
    parser.add_argument("--sessions", default="1,2", help="levels, comma-separated")
    parser.add_argument("--voices", default=",".join(VOICES))
    parser.add_argument("--questions", type=Path, default=QUESTIONS)
    parser.add_argument("--out", type=Path, default=RESULTS / "answers.json")
    args = parser.parse_args()
    questions = json.loads(args.questions.read_text())
    levels = [int(x) for x in args.sessions.split(",") if x.strip()]
    voices: list[Voice] = [v for v in VOICES if v in args.voices.split(",")]
    print("preparing speech ...", flush=True)
    for voice in voices:
        for item in questions["questions"]:
            spoken(item["q"], RATE, voice)
    report = {
        "command": command_line(),
        "instructions": questions["instructions"],
        "target": {"accuracy": TARGET_ACCURACY, "median_answer_audio_s_below": TARGET_MEDIAN_S},
        "cpu": CpuFeatures.read().model,
        "models": [
            bench_model(m.strip(), e.strip(), levels, questions, voices)
            for m in args.models.split(",")
            for e in args.engines.split(",")
        ],
    }
    write_json(args.out, report)
    for m in report["models"]:
        for n, level in m["levels"].items():
            s = level["summary"]
            print(
                f"{m['model']} ({m['engine']}) x{n}: "
                f"{s['accuracy']:.0%} correct {s['correct_by_voice']} "
                f"({s['accuracy_heard_right']:.0%} of the {s['heard_right']} heard right), "
                f"median answer {s['answer_audio_s']['median']} s, first audio p50 "
                f"{s['first_audio_ms']['p50']} / p95 {s['first_audio_ms']['p95']} ms, "
                f"TTFT {s['stage0_ttft_ms_p50']} ms, TPOT {s['stage0_tpot_ms_p50']} ms, "
                f"target {'met' if s['target_met'] else 'MISSED'}"
            )
        print(f"{m['model']} ({m['engine']}): stage0 peak RSS {m['stage0_peak_rss_mib']} MiB")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
