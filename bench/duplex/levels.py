"""One level of N sessions on both workers, and what the window measured."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from antiphon.common.pod import shifted
from bench.duplex.clients import FRAME_S, Schedule, run_clients
from bench.duplex.report import finish
from bench.duplex.workers import (
    OUTPUT_RATE,
    STAGE0,
    STAGE1,
    WorkerProcess,
    unknown_settings,
    wait_idle,
    worker_env,
    worker_profile,
)
from bench.lib.machine import (
    MemoryPeaks,
    free_ports,
    gpu_memory_by_pid,
    gpu_query,
    now,
)
from bench.lib.procstats import ProcSampler
from bench.lib.prometheus import metric_sum, step_window
from bench.lib.stats import pct

# Real time: a frame step within its period, and audio that reaches the session
# with no gap a listener would hear (the line).
STEP_P99_MS = 80.0
GAP_P99_MS = 120.0
STEP_HISTOGRAM = "antiphon_stage0_duplex_step_seconds"
STAGE1_HISTOGRAM = "antiphon_stage1_duplex_step_seconds"
COUNTERS = {
    "late_frames": "antiphon_stage0_duplex_late_frames_total",
    "silence_frames": "antiphon_stage0_duplex_silence_frames_total",
    "dropped_input_ms": "antiphon_stage0_duplex_dropped_input_ms_total",
}


def gaps_in_window(times: Sequence[float], sched: Schedule) -> list[float]:
    """Gaps (ms) between consecutive arrivals, the later one inside the window."""
    t = np.asarray(times)
    if len(t) < 2:
        return []
    later = t[1:]
    keep = (later >= sched.window_start) & (later < sched.end)
    return list(np.diff(t)[keep] * 1000)


def summarize_clients(records: list[dict[str, Any]], sched: Schedule) -> dict[str, Any]:
    window_s = sched.end - sched.window_start
    gaps = [g for r in records for g in gaps_in_window(r["audio_times"], sched)]
    frame_gaps = [g for r in records for g in gaps_in_window(r["frame_times"], sched)]
    in_window = [
        sum(1 for t in r["audio_times"] if sched.window_start <= t < sched.end) for r in records
    ]
    lag = [x for r in records for x in r["send_lag_ms"]]
    errors = Counter(r["error"].split(":")[0] for r in records if r["error"])
    opened = [r["opened_s"] for r in records if r["opened_s"] is not None]
    return {
        "audio_gap_ms": {"p50": pct(gaps, 50), "p99": pct(gaps, 99), "max": pct(gaps, 100)},
        "frame_gap_ms": {"p50": pct(frame_gaps, 50), "p99": pct(frame_gaps, 99)},
        "audio_chunks": sum(in_window),
        "audio_chunks_expected": int(len(records) * window_s / FRAME_S),
        "sessions_streaming": sum(1 for n in in_window if n > 0),
        "late_flagged_frames": sum(r["late_flagged"] for r in records),
        "send_lag_ms": {"p50": pct(lag, 50), "p99": pct(lag, 99)},
        "bind_s_max": max(opened) if opened else None,
        "errors": dict(errors),
        "error_sample": next((r["error"] for r in records if r["error"]), None),
    }


def run_level(
    args: argparse.Namespace, workers: Sequence[WorkerProcess], sessions: int, rate: int
) -> dict[str, Any]:
    stage0, stage1 = workers
    asyncio.run(wait_idle(workers))
    # Time for the client processes to start and bind before the audio starts.
    start = now() + (1.0 if sessions <= args.sessions_per_proc else 3.0) + sessions * 0.01
    sched = Schedule(start, start + args.warmup_s, start + args.warmup_s + args.window_s)
    pids = {"stage0": stage0.proc.pid, "stage1": stage1.proc.pid}  # type: ignore[union-attr]
    sampler = ProcSampler(pids).start()
    marks: dict[str, Any] = {}

    def at_window() -> None:
        time.sleep(max(0.0, sched.window_start - now()))
        marks["before"] = (stage0.scrape(), stage1.scrape(), sampler.mark())
        time.sleep(max(0.0, sched.end - now()))
        marks["after"] = (stage0.scrape(), stage1.scrape(), gpu_memory_by_pid())
        marks["cpu"] = sampler.usage(marks["before"][2])

    timer = threading.Thread(target=at_window, daemon=True)
    t0 = now()
    with MemoryPeaks() as gpu:
        timer.start()
        stage0_addresses = [shifted(stage0.address, i) for i in range(args.front_ends)]
        stage1_addresses = [shifted(stage1.address, i) for i in range(args.stage1_front_ends)]
        records = run_clients(args, (stage0_addresses, stage1_addresses), sessions, sched, rate)
        timer.join()
    sampler.stop()
    (s0_before, s1_before, _), (s0_after, s1_after, gpu_pids) = marks["before"], marks["after"]
    level: dict[str, Any] = {"sessions": sessions, "wall_s": round(now() - t0, 1)}
    level["worker_step_ms"] = step_window(s0_before, s0_after, STEP_HISTOGRAM)
    level["stage1_step_ms"] = step_window(s1_before, s1_after, STAGE1_HISTOGRAM)
    for key, name in COUNTERS.items():
        level[key] = round(metric_sum(s0_after, name) - metric_sum(s0_before, name), 1)
    level |= summarize_clients(records, sched)
    level["gpu_memory_mib"] = {
        "stage0": gpu_pids.get(pids["stage0"]),
        "stage1": gpu_pids.get(pids["stage1"]),
        "device_peak": gpu.peak_mib,
    }
    level["cpu_pct"] = {k: marks["cpu"][k]["cpu_pct"] for k in ("stage0", "stage1", "machine")}
    level["workers_alive"] = all(w.proc is not None and w.proc.poll() is None for w in workers)
    p99, gap = level["worker_step_ms"]["p99"], level["audio_gap_ms"]["p99"]
    level["real_time"] = bool(
        level["workers_alive"]
        and p99 is not None
        and p99 < STEP_P99_MS
        and level["late_frames"] == 0
        and gap is not None
        and gap < GAP_P99_MS
        and level["sessions_streaming"] == sessions
        and not level["errors"]
    )
    return level


def run_worker_levels(args: argparse.Namespace, result: dict[str, Any], deadline: float) -> None:
    # With front ends (either stage's duplex_front_ends), theirs are
    # consecutive, and the stepper's metrics (the step histogram) follow theirs.
    ports = {"stage0": free_ports(args.front_ends), "stage1": free_ports(args.stage1_front_ends)}
    ports["stage0_metrics"] = free_ports(args.front_ends + 1)
    ports["stage1_metrics"] = free_ports(args.stage1_front_ends + 1)
    step_metrics = ports["stage0_metrics"] + (args.front_ends if args.front_ends > 1 else 0)
    stage1_step_metrics = ports["stage1_metrics"] + (
        args.stage1_front_ends if args.stage1_front_ends > 1 else 0
    )
    profile = worker_profile(args, ports)
    result["worker_profile"] = profile
    result["settings_unknown_to_workers"] = unknown_settings(profile)
    profile_path = args.out.with_name(args.out.stem + "-profile.json")
    profile_path.write_text(json.dumps(profile, indent=2) + "\n")  # YAML reads JSON
    env = worker_env(args, profile_path)
    workers = [
        WorkerProcess(*STAGE0, f"127.0.0.1:{ports['stage0']}", step_metrics),
        WorkerProcess(*STAGE1, f"127.0.0.1:{ports['stage1']}", stage1_step_metrics),
    ]
    try:
        for w, name in zip(workers, ("stage0", "stage1"), strict=True):
            w.start(env, args.out.with_name(f"{args.out.stem}-{name}.log"))

        async def ready() -> list[float]:
            return list(
                await asyncio.gather(*(w.wait_ready(args.startup_timeout) for w in workers))
            )

        startup = asyncio.run(ready())
        result["worker_startup_s"] = {
            "stage0": round(startup[0], 1),
            "stage1": round(startup[1], 1),
        }
        info0 = asyncio.run(workers[0].describe())
        caps = info0.capabilities
        rate = caps.input_sample_rate_hz or OUTPUT_RATE
        result["stage0_info"] = {
            "backend": info0.backend,
            "capacity": info0.capacity,
            "model_native": caps.model_native,
            "input_sample_rate_hz": caps.input_sample_rate_hz,
        }
        result["gpu_memory_after_start_mib"] = sum(float(u) for u in gpu_query("memory.used"))
        print(f"workers ready in {startup[0]:.0f}s / {startup[1]:.0f}s", flush=True)
        # The first steps capture CUDA graphs: one session primes both workers, unmeasured.
        if args.device.startswith("cuda"):
            prime = argparse.Namespace(**{**vars(args), "warmup_s": 3.0, "window_s": 2.0})
            result["priming"] = level_line(run_level(prime, workers, 1, rate))
        overhead = 5.0
        for sessions in args.levels:
            need = args.warmup_s + args.window_s + overhead
            if args.budget_s and now() + need > deadline:
                result["skipped_levels"].append(sessions)
                print(f"N={sessions}: skipped, {need:.0f}s would pass the budget", flush=True)
                continue
            level = run_level(args, workers, sessions, rate)
            overhead = max(overhead, 1.5 * (level["wall_s"] - args.warmup_s - args.window_s))
            result["levels"].append(level)
            finish(result, args.out)
            print(level_line(level), flush=True)
            if not level["workers_alive"]:
                print("a worker exited:", *(w.tail() for w in workers), sep="\n", flush=True)
                break
    finally:
        for w in workers:
            w.stop()


def level_line(lv: dict[str, Any]) -> str:
    s, g = lv["worker_step_ms"], lv["audio_gap_ms"]
    return (
        f"N={lv['sessions']:>4} step p50/p99 {s['p50']}/{s['p99']} ms, late {lv['late_frames']},"
        f" silence {lv['silence_frames']}, gap p50/p99 {g['p50']}/{g['p99']} ms,"
        f" chunks {lv['audio_chunks']}/{lv['audio_chunks_expected']},"
        f" real time {lv['real_time']} errors {lv['errors'] or '-'}"
    )
