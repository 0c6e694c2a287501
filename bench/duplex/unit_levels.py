"""A unit model's levels (`--model minicpmo`): its stage0 worker (the thinker) and
its stage1 worker (the voice; none under `--no-voice`), no reference loop, N
sessions of units.py a level, and what the window measured."""

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
from bench.duplex.unit_voice import (
    VOICE_MAX_MS,
    first_audio,
    summarize_voice,
    voice_real_time,
    worker_voice,
)
from bench.duplex.units import APPEND_S, GRACE_S, camera_frame, run_unit_session, summarize_units
from bench.duplex.workers import (
    MODELS,
    STAGE0,
    STAGE1,
    WorkerProcess,
    stage1_backend,
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
    args: argparse.Namespace,
    workers: tuple[WorkerProcess, WorkerProcess | None],
    sessions: int,
    rate: int,
    frames: bool,
) -> dict[str, Any]:
    worker, voice = workers
    running = [w for w in workers if w is not None]
    asyncio.run(wait_idle(running))
    unit_s = MODELS[args.model].unit_ms / 1000
    start = now() + (1.0 if sessions <= args.sessions_per_proc else 3.0) + sessions * 0.01
    sched = Schedule(start, start + args.warmup_s, start + args.warmup_s + args.window_s)
    pids = {"stage0": worker.proc.pid}  # type: ignore[union-attr]
    if voice is not None:
        pids["stage1"] = voice.proc.pid  # type: ignore[union-attr]
    sampler = ProcSampler(pids).start()
    marks: dict[str, Any] = {}

    def at_window() -> None:
        time.sleep(max(0.0, sched.window_start - now()))
        marks["before"] = (worker.scrape(), sampler.mark())
        if voice is not None:
            marks["voice_before"] = voice.scrape()
        time.sleep(max(0.0, sched.end - now()))
        marks["after"] = (worker.scrape(), worker_gpu_mib(pids["stage0"]), gpu_query("memory.used"))
        if voice is not None:
            marks["voice_mib"] = worker_gpu_mib(pids["stage1"])
        marks["cpu"] = sampler.usage(marks["before"][1])

    frame = camera_frame() if frames else None
    session = functools.partial(run_unit_session, unit_s=unit_s, frame=frame)
    addresses = ([worker.address], [voice.address] if voice is not None else [])
    timer = threading.Thread(target=at_window, daemon=True)
    t0 = now()
    with MemoryPeaks() as gpu:
        timer.start()
        records = run_clients(args, addresses, sessions, sched, rate, session, unit_s)
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
    if voice is not None:
        # The voice's units of the window's last seconds are spoken after it ends:
        # its worker's metrics run from the window's start to the clients' end.
        spoken = summarize_voice(records, sessions, args.window_s)
        spoken |= worker_voice(marks["voice_before"], voice.scrape())
        spoken["gpu_memory_mib"] = marks["voice_mib"]
        spoken["cpu_pct"] = marks["cpu"]["stage1"]["cpu_pct"]
        spoken["worker_alive"] = voice.proc is not None and voice.proc.poll() is None
        spoken["real_time"] = spoken["worker_alive"] and voice_real_time(spoken)
        level["voice"] = spoken
    return level


def run_unit_levels(args: argparse.Namespace, result: dict[str, Any], deadline: float) -> None:
    ports = {"stage0": free_ports(1), "stage0_metrics": free_ports(1)}
    voiced = stage1_backend(args) is not None
    if voiced:
        ports |= {"stage1": free_ports(1), "stage1_metrics": free_ports(1)}
    profile = worker_profile(args, ports)
    result["worker_profile"] = profile
    result["settings_unknown_to_workers"] = unknown_settings(profile)
    profile_path = args.out.with_name(args.out.stem + "-profile.json")
    profile_path.write_text(json.dumps(profile, indent=2) + "\n")  # YAML reads JSON
    env = worker_env(args, profile_path)
    worker = WorkerProcess(*STAGE0, f"127.0.0.1:{ports['stage0']}", ports["stage0_metrics"])
    voice = (
        WorkerProcess(*STAGE1, f"127.0.0.1:{ports['stage1']}", ports["stage1_metrics"])
        if voiced
        else None
    )
    workers = (worker, voice)
    logs = {name: args.out.with_name(f"{args.out.stem}-{name}.log") for name in stages(workers)}
    try:
        worker.start(env, logs["stage0"])
        # On a GPU the voice starts once the thinker is ready: vLLM sizes its KV
        # cache from what the card has free while it profiles, alone on it then.
        # On a CPU both start at once.
        after = args.device.startswith("cuda")
        if voice is not None and not after:
            voice.start(env, logs["stage1"])
        startup = ready(args, [w for w in workers if w is not None and w.proc is not None])
        if voice is not None and after:
            voice.start(env, logs["stage1"])
            startup += ready(args, [voice])
        result["worker_startup_s"] = dict(zip(logs, (round(s, 1) for s in startup), strict=True))
        info = asyncio.run(worker.describe())
        rate = info.capabilities.input_sample_rate_hz
        result["stage0_info"] = {
            "backend": info.backend,
            "capacity": info.capacity,
            "model_native": info.capabilities.model_native,
            "input_sample_rate_hz": rate,
            "chunk_period_ms": info.capabilities.chunk_period_ms,
        }
        if voice is not None:
            info1 = asyncio.run(voice.describe())
            result["stage1_info"] = {
                "backend": info1.backend,
                "capacity": info1.capacity,
                "model_native": info1.capabilities.model_native,
            }
        result["gpu_memory_after_start_mib"] = sum(float(u) for u in gpu_query("memory.used"))
        print(f"workers ready in {result['worker_startup_s']}", flush=True)
        # The first units on a GPU run vLLM's first multimodal batches (and its first
        # batches of a size), and the voice's first: --prime-sessions sessions, unmeasured.
        if args.device.startswith("cuda") or args.prime_sessions > 1:
            prime = argparse.Namespace(**{**vars(args), "warmup_s": 5.0, "window_s": 5.0})
            framed = bool(args.frames or args.frames_at)
            primed = run_level(prime, workers, args.prime_sessions, rate, framed)
            result["priming"] = level_line(primed)
            print(f"priming: {result['priming']}", flush=True)
        overhead = 8.0 + GRACE_S
        for sessions, frames in schedule(args):
            need = args.warmup_s + args.window_s + overhead
            if args.budget_s and now() + need > deadline:
                result["skipped_levels"].append(sessions)
                print(f"N={sessions}: skipped, {need:.0f}s would pass the budget", flush=True)
                continue
            level = run_level(args, workers, sessions, rate, frames)
            overhead = max(overhead, 1.5 * (level["wall_s"] - args.warmup_s - args.window_s))
            result["levels"].append(level)
            finish(result, args.out)
            print(level_line(level), flush=True)
            if not level["workers_alive"] or not level.get("voice", {}).get("worker_alive", True):
                tails = [w.tail() for w in workers if w is not None]
                print("a worker exited:", *tails, sep="\n", flush=True)
                break
    finally:
        for w in workers:
            if w is not None:
                w.stop()


def schedule(args: argparse.Namespace) -> list[tuple[int, bool]]:
    """The levels in order, (sessions, with frames): `--levels` ascending (all with
    frames under `--frames`), each `--frames-at` level right after the plain one of
    its size."""
    plain = [] if args.frames else sorted(set(args.levels))
    framed = sorted(set(args.levels)) if args.frames else sorted(set(args.frames_at))
    return sorted([(n, False) for n in plain] + [(n, True) for n in framed])


def stages(workers: tuple[WorkerProcess, WorkerProcess | None]) -> list[str]:
    """The stages running: stage0, and stage1 when the voice runs."""
    return ["stage0", "stage1"][: 2 if workers[1] is not None else 1]


def ready(args: argparse.Namespace, workers: list[WorkerProcess]) -> list[float]:
    """Seconds until each is ready (started at once, waited on together)."""

    async def wait() -> list[float]:
        return list(await asyncio.gather(*(w.wait_ready(args.startup_timeout) for w in workers)))

    return asyncio.run(wait())


def level_line(lv: dict[str, Any]) -> str:
    u, w = lv["unit_latency_ms"], lv["worker_unit_ms"]
    line = (
        f"N={lv['sessions']:>4}{' +frames' if lv['frames'] else ''} unit p50/p99"
        f" {u['p50']}/{u['p99']} ms (worker {w['p50']}/{w['p99']}),"
        f" answered {lv['units_answered']}/{lv['units_closed']}, late {lv['late_units']},"
        f" dropped {lv['dropped_input_ms']} ms, restarts {lv['context_restarts']},"
        f" real time {lv['real_time']} errors {lv['errors'] or '-'}"
    )
    if (v := lv.get("voice")) is None:
        return line
    lat, (first, when) = v["latency_ms"], first_audio(v)
    return line + (
        f"; voice p50/p99/max {lat['p50']}/{lat['p99']}/{lat['max']} ms"
        f" (worker {v['worker_unit_ms']['p50']}/{v['worker_unit_ms']['p99']},"
        f" batch {v['batch_units_mean']}), first audio{when} p50/p99"
        f" {first['p50']}/{first['p99']} ms, heard {v['units_heard']}/{v['units_spoken']},"
        f" audio {v['audio_s_per_session_s']} s/s of {v['spoken_share']} spoken,"
        f" real time {v['real_time']} errors {v['errors'] or '-'}"
    )


def real_time_definition(voiced: bool = False) -> str:
    thinker = (
        f"unit latency p99 < {UNIT_P99_MS:.0f} ms (client side: from sending the"
        f" {APPEND_S * 1000:.0f} ms append that closed a unit to its ModelFrame; every"
        " session), every unit of the window answered, no late or dropped unit (the"
        " worker's counters and the frames' `late` flag), no error"
    )
    if not voiced:
        return thinker
    return (
        f"real_time (the thinker's): {thinker}. voice.real_time (stage1): every spoken"
        f" unit of the window (a SPEAK frame of a unit closed in it) got its AudioChunk"
        f" within {VOICE_MAX_MS:.0f} ms of its ModelFrame (client side), none dropped by"
        " the worker (antiphon_stage1_duplex_units_total{outcome=dropped}), no stage1"
        " error, and at least one unit spoken"
    )
