"""A unit model's levels (`--model minicpmo`): its stage0 worker alone (no stage1
serves it yet, and there is no reference loop), N sessions of units.py a level,
and what the window measured."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import threading
import time
from typing import Any

import psutil

from bench.duplex.clients import Schedule, run_clients
from bench.duplex.report import finish
from bench.duplex.units import APPEND_S, GRACE_S, camera_frame, run_unit_session, summarize_units
from bench.duplex.workers import (
    MODELS,
    STAGE0,
    WorkerProcess,
    unknown_settings,
    wait_idle,
    worker_env,
    worker_profile,
)
from bench.lib.machine import MemoryPeaks, free_ports, gpu_memory_by_pid, gpu_query, now
from bench.lib.procstats import ProcSampler
from bench.lib.prometheus import metric_sum, step_window

# Real time: every unit decided within its own second, none late or dropped.
UNIT_P99_MS = 1000.0
UNIT_HISTOGRAM = "antiphon_stage0_duplex_unit_seconds"
COUNTERS = {
    "late_units": "antiphon_stage0_duplex_late_frames_total",
    "dropped_input_ms": "antiphon_stage0_duplex_dropped_input_ms_total",
    "context_restarts": "antiphon_stage0_duplex_context_restarts_total",
}


def worker_gpu_mib(pid: int) -> float | None:
    """GPU memory of the worker's process tree (vLLM's engine core is a child),
    None where nvidia-smi names none of its pids (a container's other view)."""
    by_pid = gpu_memory_by_pid()
    try:
        tree = [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return None
    used = [by_pid[p] for p in tree if p in by_pid]
    return sum(used) if used else None


def run_level(
    args: argparse.Namespace, worker: WorkerProcess, sessions: int, rate: int, frames: bool
) -> dict[str, Any]:
    asyncio.run(wait_idle([worker]))
    unit_s = MODELS[args.model].unit_ms / 1000
    start = now() + (1.0 if sessions <= args.sessions_per_proc else 3.0) + sessions * 0.01
    sched = Schedule(start, start + args.warmup_s, start + args.warmup_s + args.window_s)
    pid = worker.proc.pid  # type: ignore[union-attr]
    sampler = ProcSampler({"stage0": pid}).start()
    marks: dict[str, Any] = {}

    def at_window() -> None:
        time.sleep(max(0.0, sched.window_start - now()))
        marks["before"] = (worker.scrape(), sampler.mark())
        time.sleep(max(0.0, sched.end - now()))
        marks["after"] = (worker.scrape(), worker_gpu_mib(pid), gpu_query("memory.used"))
        marks["cpu"] = sampler.usage(marks["before"][1])

    frame = camera_frame() if frames else None
    session = functools.partial(run_unit_session, unit_s=unit_s, frame=frame)
    timer = threading.Thread(target=at_window, daemon=True)
    t0 = now()
    with MemoryPeaks() as gpu:
        timer.start()
        records = run_clients(args, ([worker.address], []), sessions, sched, rate, session, unit_s)
        timer.join()
    sampler.stop()
    (before, _), (after, worker_mib, used) = marks["before"], marks["after"]
    level: dict[str, Any] = {"sessions": sessions, "frames": bool(frame)}
    level["wall_s"] = round(now() - t0, 1)
    level["worker_unit_ms"] = step_window(before, after, UNIT_HISTOGRAM)
    for key, name in COUNTERS.items():
        level[key] = round(metric_sum(after, name) - metric_sum(before, name), 1)
    level |= summarize_units(records)
    level["gpu_memory_mib"] = {
        "stage0": worker_mib,
        "device_used": sum(float(u) for u in used) if used else None,
        "device_peak": gpu.peak_mib,
    }
    level["cpu_pct"] = {k: marks["cpu"][k]["cpu_pct"] for k in ("stage0", "machine")}
    level["workers_alive"] = worker.proc is not None and worker.proc.poll() is None
    lat = level["unit_latency_ms"]
    level["real_time"] = bool(
        level["workers_alive"]
        and lat["p99"] is not None
        and lat["p99"] < UNIT_P99_MS
        and level["units_answered"] == level["units_closed"] > 0
        and level["late_units"] == 0
        and level["dropped_input_ms"] == 0
        and level["late_flagged_frames"] == 0
        and level["sessions_answered"] == sessions
        and not level["errors"]
    )
    return level


def run_unit_levels(args: argparse.Namespace, result: dict[str, Any], deadline: float) -> None:
    ports = {"stage0": free_ports(1), "stage0_metrics": free_ports(1)}
    profile = worker_profile(args, ports)
    result["worker_profile"] = profile
    result["settings_unknown_to_workers"] = unknown_settings(profile)
    profile_path = args.out.with_name(args.out.stem + "-profile.json")
    profile_path.write_text(json.dumps(profile, indent=2) + "\n")  # YAML reads JSON
    worker = WorkerProcess(*STAGE0, f"127.0.0.1:{ports['stage0']}", ports["stage0_metrics"])
    try:
        worker.start(
            worker_env(args, profile_path), args.out.with_name(f"{args.out.stem}-stage0.log")
        )
        result["worker_startup_s"] = {"stage0": round(asyncio.run(ready(args, worker)), 1)}
        info = asyncio.run(worker.describe())
        rate = info.capabilities.input_sample_rate_hz
        result["stage0_info"] = {
            "backend": info.backend,
            "capacity": info.capacity,
            "model_native": info.capabilities.model_native,
            "input_sample_rate_hz": rate,
            "chunk_period_ms": info.capabilities.chunk_period_ms,
        }
        result["gpu_memory_after_start_mib"] = sum(float(u) for u in gpu_query("memory.used"))
        print(f"worker ready in {result['worker_startup_s']['stage0']:.0f}s", flush=True)
        # The first units on a GPU run vLLM's first multimodal batches (and its first
        # batches of a size): --prime-sessions sessions, unmeasured.
        if args.device.startswith("cuda") or args.prime_sessions > 1:
            prime = argparse.Namespace(**{**vars(args), "warmup_s": 5.0, "window_s": 5.0})
            framed = bool(args.frames or args.frames_at)
            primed = run_level(prime, worker, args.prime_sessions, rate, framed)
            result["priming"] = level_line(primed)
            print(f"priming: {result['priming']}", flush=True)
        overhead = 8.0 + GRACE_S
        for sessions, frames in schedule(args):
            need = args.warmup_s + args.window_s + overhead
            if args.budget_s and now() + need > deadline:
                result["skipped_levels"].append(sessions)
                print(f"N={sessions}: skipped, {need:.0f}s would pass the budget", flush=True)
                continue
            level = run_level(args, worker, sessions, rate, frames)
            overhead = max(overhead, 1.5 * (level["wall_s"] - args.warmup_s - args.window_s))
            result["levels"].append(level)
            finish(result, args.out)
            print(level_line(level), flush=True)
            if not level["workers_alive"]:
                print("the worker exited:", worker.tail(), sep="\n", flush=True)
                break
    finally:
        worker.stop()


def schedule(args: argparse.Namespace) -> list[tuple[int, bool]]:
    """The levels in order, (sessions, with frames): `--levels` ascending (all with
    frames under `--frames`), each `--frames-at` level right after the plain one of
    its size."""
    plain = [] if args.frames else sorted(set(args.levels))
    framed = sorted(set(args.levels)) if args.frames else sorted(set(args.frames_at))
    return sorted([(n, False) for n in plain] + [(n, True) for n in framed])


async def ready(args: argparse.Namespace, worker: WorkerProcess) -> float:
    return await worker.wait_ready(args.startup_timeout)


def level_line(lv: dict[str, Any]) -> str:
    u, w = lv["unit_latency_ms"], lv["worker_unit_ms"]
    return (
        f"N={lv['sessions']:>4}{' +frames' if lv['frames'] else ''} unit p50/p99"
        f" {u['p50']}/{u['p99']} ms (worker {w['p50']}/{w['p99']}),"
        f" answered {lv['units_answered']}/{lv['units_closed']}, late {lv['late_units']},"
        f" dropped {lv['dropped_input_ms']} ms, restarts {lv['context_restarts']},"
        f" real time {lv['real_time']} errors {lv['errors'] or '-'}"
    )


def real_time_definition() -> str:
    return (
        f"unit latency p99 < {UNIT_P99_MS:.0f} ms (client side: from sending the"
        f" {APPEND_S * 1000:.0f} ms append that closed a unit to its ModelFrame; every"
        " session), every unit of the window answered, no late or dropped unit (the"
        " worker's counters and the frames' `late` flag), no error"
    )
