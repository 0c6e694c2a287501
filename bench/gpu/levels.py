"""One level of N sessions through the worker, and what it measured."""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from typing import Any

from bench.gpu.sessions import run_clients
from bench.gpu.worker import Worker, worker_env
from bench.lib.machine import MemoryPeaks, free_ports, now
from bench.lib.profile import profile_summary, profiled
from bench.lib.prometheus import histogram_delta, seconds_histogram_ms
from bench.lib.results import write_json
from bench.lib.stats import pct

SLO_MS = 150.0


def summarize(sessions: int, turns: int, records: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in records if r.get("completed")]
    ttft = [r["ttft_ms"] for r in done if r.get("ttft_ms") is not None]
    stage_ttft = [r["stage_ttft_ms"] for r in done if r.get("stage_ttft_ms")]
    over = [
        r["ttft_ms"] - r["stage_ttft_ms"]
        for r in done
        if r.get("ttft_ms") is not None and r.get("stage_ttft_ms")
    ]
    tpot = [r["tpot_ms"] for r in done if r.get("tpot_ms")]
    asr = [r["asr_ms"] for r in records if r.get("asr_ms") is not None]
    errors = Counter(str(r.get("error", "")).split(":")[0] for r in records if r.get("error"))
    finish = Counter(str(r.get("finish", "")) for r in records if r.get("finish"))
    return {
        "sessions": sessions,
        "ttft_ms": {"p50": pct(ttft, 50), "p95": pct(ttft, 95)},
        "tpot_ms": {"p50": pct(tpot, 50)},
        "asr_ms": {"p50": pct(asr, 50)},
        "completed": len(done),
        "expected": sessions * turns,
        "turns": turns,
        "ttft_ms_p99": pct(ttft, 99),
        "stage_ttft_ms": {"p50": pct(stage_ttft, 50), "p95": pct(stage_ttft, 95)},
        # Per turn, what the session saw less vLLM's own TTFT: the worker's wait
        # before the engine, its output path, the gRPC hops and the client's read.
        "ttft_over_engine_ms": {"p50": pct(over, 50), "p95": pct(over, 95)},
        "asr_ms_p95": pct(asr, 95),
        # Turn 0's prompt is new but for the preamble; a later turn's extends
        # the last, so the prefix cache decides what it costs.
        "ttft_ms_by_turn": {
            str(k): {"p50": pct(by, 50), "p95": pct(by, 95)}
            for k in sorted({r["turn"] for r in done if r.get("turn", -1) >= 0})
            if (by := [r["ttft_ms"] for r in done if r.get("turn") == k and r.get("ttft_ms")])
        },
        "tokens_mean": round(sum(r.get("tokens", 0) for r in done) / len(done), 1) if done else 0,
        "empty_transcripts": sum(
            1 for r in records if r.get("asr_ms") is not None and not r.get("transcript")
        ),
        "finish_reasons": dict(finish),
        "errors": dict(errors),
        "error_sample": next((r["error"] for r in records if r.get("error")), None),
        "sample": next(
            ({"heard": r.get("transcript", ""), "said": r.get("answer", "")[:120]} for r in done),
            None,
        ),
    }


def prefill_by_turn(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per turn, the mean prompt length and how much of it the prefix cache held."""
    out = {}
    for k in sorted({r["turn"] for r in records}):
        own = [r for r in records if r["turn"] == k and r.get("cached_tokens") is not None]
        if own:
            out[str(k)] = {
                "prompt_mean": round(sum(r["prompt_tokens"] for r in own) / len(own), 1),
                "cached_mean": round(sum(r["cached_tokens"] for r in own) / len(own), 1),
            }
    return out


def capacity_at_slo(levels: list[dict[str, Any]], slo_ms: float = SLO_MS) -> int | None:
    """The largest N whose TTFT p95 is within the SLO and whose turns all completed."""
    ok = [
        lv["sessions"]
        for lv in levels
        if lv["ttft_ms"]["p95"] is not None
        and lv["ttft_ms"]["p95"] <= slo_ms
        and lv["completed"] == lv["expected"]
    ]
    return max(ok) if ok else None


def turns_at_level(args: argparse.Namespace, sessions: int) -> int:
    """`--turns`, or fewer from `--turns-at N:T` for levels of N sessions and more."""
    turns = args.turns
    for spec in sorted(args.turns_at, key=lambda s: int(s.partition(":")[0])):
        at, _, count = spec.partition(":")
        if sessions >= int(at):
            turns = int(count)
    return turns


def run_worker_levels(args: argparse.Namespace, llm_model: str, result: dict[str, Any]) -> None:
    port, metrics_port = free_ports(args.front_ends), free_ports(args.front_ends)
    env = worker_env(args, llm_model, port, metrics_port)
    log = args.out.with_name(args.out.stem + "-worker.log")
    t0 = now()
    worker = Worker(
        env,
        port,
        metrics_port,
        log,
        traceable=args.profile_at is not None,
        front_ends=args.front_ends,
    )
    try:
        startup = asyncio.run(worker.ready(args.startup_timeout))
        result["worker_startup_s"] = round(startup, 1)
        print(f"stage0 ready in {startup:.0f}s ({', '.join(worker.addresses)})", flush=True)
        # The first request of an engine pays its warm-up: not measured.
        run_clients(worker.addresses, args.front_ends, 1, args, "warmup")
        for sessions in args.levels:
            if args.budget_s and now() - t0 > args.budget_s:
                result["skipped_levels"].append(sessions)
                continue
            turns = turns_at_level(args, sessions)
            before = worker.scrape()
            started = now()
            spy = args.py_spy if sessions == args.profile_at else None
            profile = args.out.with_name(f"{args.out.stem}-profile-{sessions}.txt")
            with MemoryPeaks(worker.proc.pid) as gpu, profiled(spy, worker.proc.pid, profile):
                records = run_clients(worker.addresses, sessions, turns, args, f"n{sessions}")
            level = summarize(sessions, turns, records)
            after = worker.scrape()
            if spy and profile.is_file():
                print(profile_summary(profile), flush=True)
            level["wall_s"] = round(now() - started, 1)
            level["vad_batch"] = histogram_delta(before, after, "antiphon_stage0_vad_batch_size")
            # Where the worker's share of TTFT goes: waiting on its one event loop
            # before the engine gets the prompt, and how late that loop runs at all.
            level["generate_wait_ms"] = seconds_histogram_ms(
                before, after, "antiphon_stage0_generate_wait_seconds"
            )
            level["loop_lag_ms"] = seconds_histogram_ms(
                before, after, "antiphon_stage0_event_loop_lag_seconds"
            )
            level["gpu_memory_mib"] = gpu.peak_mib
            # The pod's memory: the supervisor, its front ends and the engine core.
            level["host_memory_mib"] = gpu.host_peak_mib
            result["levels"].append(level)
            result["capacity_at_slo"] = capacity_at_slo(result["levels"])
            write_json(args.out, result)
            print_level(level)
            if worker.proc.poll() is not None:
                raise RuntimeError(f"stage0 died:\n{worker.tail()}")
    finally:
        worker.stop()


def print_level(lv: dict[str, Any]) -> None:
    print(
        f"N={lv['sessions']:>4} ttft p50/p95 {lv['ttft_ms']['p50']}/{lv['ttft_ms']['p95']} ms"
        f" tpot {lv['tpot_ms']['p50']} ms asr p50 {lv['asr_ms']['p50']} ms"
        f" completed {lv['completed']}/{lv['expected']} errors {lv.get('errors')}"
        f" vad_batch {lv.get('vad_batch', {}).get('mean')} gpu {lv.get('gpu_memory_mib')} MiB"
        f" host {lv.get('host_memory_mib')} MiB by turn {lv.get('ttft_ms_by_turn')}"
        f" generate wait {lv.get('generate_wait_ms')} loop lag {lv.get('loop_lag_ms')}"
        f" wall {lv.get('wall_s')} s",
        flush=True,
    )
