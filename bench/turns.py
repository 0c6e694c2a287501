"""Spoken turns against the real stack: latency from the client's clock, memory per service.

    python -m bench.turns --turns 5

Starts its own stack (real models), opens one session with
`turn_detection: null`, and for each turn streams a spoken question,
commits, asks for a response and measures on the client's monotonic clock:
commit -> first audio delta, and commit -> response.done. Stage0's TTFT
comes from the engine's own clock (`response.done` stage metrics) and is
reported beside, never merged. Peak resident memory (VmHWM) is read per
service process, and per child for stage0's vLLM engine core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.lib.machine import peak_rss_mib
from bench.lib.questions import QUESTIONS
from bench.lib.realtime import MANUAL, RealtimeClient, duplex_url, of_type
from bench.lib.results import RESULTS, write_json
from bench.lib.speech import spoken
from deploy.local.stack import LocalStack, Ports


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    direct = [int(p) for p in text.split()]
    return direct + [c for p in direct for c in children(p)]


def memory(stack: LocalStack) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, proc in stack.procs.items():
        entry: dict[str, Any] = {"peak_rss_mib": round(peak_rss_mib(proc.pid), 1)}
        kids = {c: round(peak_rss_mib(c), 1) for c in children(proc.pid)}
        if kids:
            entry["children_peak_rss_mib"] = kids
        out[name] = entry
    return out


async def run_turns(stack: LocalStack, turns: int) -> list[dict[str, Any]]:
    # The duplex dialect: stage metrics ride its `response.done` metadata.
    client = await RealtimeClient.connect(duplex_url(stack.ports.gateway))
    results = []
    try:
        await client.open(**MANUAL, extra_body={"return_stage_metrics": True})
        for i in range(turns):
            question = QUESTIONS[i % len(QUESTIONS)]
            await client.append(spoken(question))
            start = len(client.events)
            t_commit = time.monotonic()
            await client.send("input_audio_buffer.commit")
            await client.send("response.create")
            first = await client.until(lambda e: e["type"] == "response.output_audio.delta", 120)
            t_first = time.monotonic()
            await client.response_cycle(120)
            t_done = time.monotonic()
            events = client.events[start:]
            done = of_type(events, "response.done")[0]["response"]
            metrics = done["metadata"].get("stage_metrics", {})
            heard = of_type(events, "conversation.item.input_audio_transcription.completed")
            results.append(
                {
                    "question": question,
                    "heard": heard[0]["transcript"] if heard else "",
                    "answer": of_type(events, "response.output_audio_transcript.done")[0][
                        "transcript"
                    ],
                    "commit_to_first_audio_ms": round((t_first - t_commit) * 1000, 1),
                    "commit_to_done_ms": round((t_done - t_commit) * 1000, 1),
                    "first_audio_ms_of_audio": first["metadata"]["audio_duration_ms"],
                    "stage0_ttft_ms": round(metrics.get("vllm_ttft_ms", 0.0), 1),
                    "stage0_tpot_ms": round(metrics.get("vllm_tpot_ms", 0.0), 1),
                    "stage1_first_audio_ms": round(metrics.get("stage1_first_audio_ms", 0.0), 1),
                    "status": done["status"],
                }
            )
            print(json.dumps(results[-1]), flush=True)
    finally:
        await client.close()
    return results


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    c2a = [r["commit_to_first_audio_ms"] for r in results]
    ttft = [r["stage0_ttft_ms"] for r in results]
    return {
        "turns": len(results),
        "commit_to_first_audio_ms": {
            "p50": round(statistics.median(c2a), 1),
            "max": max(c2a),
            "min": min(c2a),
        },
        "stage0_ttft_ms": {"p50": round(statistics.median(ttft), 1), "max": max(ttft)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.turns", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "turns.json")
    args = parser.parse_args()
    stack = LocalStack(ports=Ports.free())
    try:
        t0 = time.monotonic()
        stack.start(timeout_s=600)
        startup_s = round(time.monotonic() - t0, 1)
        results = asyncio.run(run_turns(stack, args.turns))
        report = {
            "startup_s": startup_s,
            "summary": summary(results),
            "memory": memory(stack),
            "turns": results,
        }
    finally:
        stack.stop()
    write_json(args.out, report)
    print(json.dumps({k: report[k] for k in ("startup_s", "summary", "memory")}, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
