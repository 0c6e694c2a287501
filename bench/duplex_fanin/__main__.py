"""`python -m bench.duplex_fanin`: see the package's docstring (bench/duplex_fanin/__init__.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

import bench.duplex_fanin
from antiphon.common.grpcserver import check_ready
from bench.duplex.clients import FRAME_S, Schedule, run_clients
from bench.duplex.levels import COUNTERS, GAP_P99_MS, STEP_HISTOGRAM, summarize_clients
from bench.duplex.workers import STAGE0, STAGE1, WorkerProcess, worker_env, worker_profile
from bench.lib.args import ints
from bench.lib.machine import device_name, free_ports, now, version
from bench.lib.procstats import ProcSampler
from bench.lib.prometheus import metric_sum, scrape, step_window
from bench.lib.results import RESULTS, git_commit, write_json


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.duplex_fanin",
        description=bench.duplex_fanin.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--front-ends",
        dest="counts",
        type=ints,
        default=[1, 2],
        help="duplex_front_ends, each in turn",
    )
    ap.add_argument("--levels", type=ints, default=[8, 16, 32, 48, 64])
    ap.add_argument("--checkpoint", default="random:tiny")
    ap.add_argument(
        "--step-ms",
        type=float,
        default=40.0,
        help="the model step as a sleep of this long (cheap_step.py); 0: the model's own",
    )
    ap.add_argument(
        "--stage1",
        action="store_true",
        help="also a stage1 mimi worker (one process, its decode a sleep of --stage1-step-ms):"
        " every frame forwarded to it, its audio gap measured",
    )
    ap.add_argument("--stage1-step-ms", type=float, default=10.0)
    ap.add_argument(
        "--stage1-front-ends",
        dest="stage1_counts",
        type=ints,
        default=[1],
        help="with --stage1: its duplex_front_ends, each in turn (behind each --front-ends)",
    )
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--window-s", type=float, default=8.0)
    ap.add_argument("--client-procs", type=int, default=1)
    ap.add_argument("--sessions-per-proc", type=int, default=256)
    ap.add_argument("--stop-after-failures", type=int, default=2, help="levels in a row")
    ap.add_argument("--stage0-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument("--out", type=Path, default=RESULTS / "duplex-fanin-cpu.json")
    ap.add_argument("--table", type=Path, help="print a results file as a markdown table")
    args = ap.parse_args(argv)
    args.levels = sorted(set(args.levels))
    # What bench/duplex's worker profile reads: the Moshi architecture (its
    # stepper takes front ends), the CPU, float32, moshi's own cache.
    fixed: dict[str, Any] = {"model": "moshi", "device": "cpu", "dtype": "float32", "threads": 1}
    fixed |= {"kv_cache": "model", "context": None, "torch_compile": False, "stage1_set": []}
    # bench/duplex's own; the profile's are set per count
    fixed |= {"front_ends": 1, "stage1_front_ends": 1}
    for key, value in fixed.items():
        setattr(args, key, value)
    return args


def profile(
    args: argparse.Namespace, front_ends: int, stage1_front_ends: int, ports: dict[str, int]
) -> dict[str, Any]:
    """bench/duplex's profile with K stage0 front ends and K1 stage1 ones."""
    full = worker_profile(args, ports)
    full["stage0"]["duplex_front_ends"] = front_ends
    full["stage1"]["duplex_front_ends"] = stage1_front_ends
    return full


async def ready(addresses: Sequence[str], worker: WorkerProcess) -> None:
    await worker.wait_ready(300)
    for address in addresses:
        async with grpc.aio.insecure_channel(address) as channel:
            # The front ends after the first are ready about when it is.
            for _ in range(300):
                if await check_ready(channel, worker.service):
                    break
                await asyncio.sleep(0.2)


def run_level(
    args: argparse.Namespace,
    addresses: list[str],
    stage1: list[str],
    metrics_port: int,
    sessions: int,
    pids: dict[str, int],
) -> dict[str, Any]:
    start = now() + 1.0 + sessions * 0.01
    sched = Schedule(start, start + args.warmup_s, start + args.warmup_s + args.window_s)
    marks: dict[str, Any] = {}
    # Each worker's process tree (a stepper and its front ends): its CPU over the window.
    sampler = ProcSampler(pids).start()

    def at_window() -> None:
        time.sleep(max(0.0, sched.window_start - now()))
        marks["before"], marks["cpu"] = scrape([metrics_port]), sampler.mark()
        time.sleep(max(0.0, sched.end - now()))
        marks["after"], marks["cpu"] = scrape([metrics_port]), sampler.usage(marks["cpu"])

    timer = threading.Thread(target=at_window, daemon=True)
    timer.start()
    records = run_clients(args, (addresses, stage1), sessions, sched, 24_000)
    timer.join()
    sampler.stop()
    before, after = marks["before"], marks["after"]
    clients = summarize_clients(records, sched)
    frames = sum(
        sum(1 for t in r["frame_times"] if sched.window_start <= t < sched.end) for r in records
    )
    audio = sum(len(r["send_lag_ms"]) for r in records)
    level: dict[str, Any] = {
        "sessions": sessions,
        "step_ms": step_window(before, after, STEP_HISTOGRAM),
        "late_frames": round(
            metric_sum(after, COUNTERS["late_frames"]) - metric_sum(before, COUNTERS["late_frames"])
        ),
        "frame_gap_ms": clients["frame_gap_ms"],
        "audio_gap_ms": clients["audio_gap_ms"] if stage1 else None,
        "frames": frames,
        "frames_expected": int(sessions * args.window_s / FRAME_S),
        "messages_per_s": round((audio + frames) / args.window_s),
        "send_lag_ms": clients["send_lag_ms"],
        "sessions_streaming": sum(
            1 for r in records if any(sched.window_start <= t for t in r["frame_times"])
        ),
        "errors": clients["errors"],
        # `others`: the clients (and anything else on the machine).
        "cpu_pct": {name: marks["cpu"][name]["cpu_pct"] for name in (*pids, "others", "machine")},
    }
    gaps = [level["frame_gap_ms"]["p99"], *([clients["audio_gap_ms"]["p99"]] if stage1 else [])]
    level["held"] = bool(
        level["late_frames"] == 0
        and all(gap is not None and gap < GAP_P99_MS for gap in gaps)
        and level["sessions_streaming"] == sessions
        and not level["errors"]
    )
    return level


def run_front_ends(
    args: argparse.Namespace, count: int, count1: int, result: dict[str, Any]
) -> None:
    """Every level with K=`count` stage0 front ends (and K1=`count1` stage1 ones)."""
    capacity = max(args.levels)
    listen, metrics = free_ports(count), free_ports(count + 1)
    ports = {"stage0": listen, "stage0_metrics": metrics}
    ports |= {"stage1": free_ports(count1), "stage1_metrics": free_ports(count1 + 1)}
    args.levels = [capacity]  # the profile's capacity
    own = profile(args, count, count1, ports)
    args.levels = result["settings"]["levels"]
    # The profile and the worker's log are the run's, not results to keep.
    run = f"k{count}-{count1}" if args.stage1 else f"k{count}"
    path = args.work / f"{run}-profile.json"
    path.write_text(json.dumps(own, indent=2) + "\n")  # YAML reads JSON
    addresses = [f"127.0.0.1:{listen + i}" for i in range(count)]
    # The step's metrics: the stepper's, after its front ends' ports.
    step_port = metrics + count if count > 1 else metrics
    module = "bench.duplex_fanin.cheap_step" if args.step_ms else STAGE0[0]
    worker = WorkerProcess(module, STAGE0[1], addresses[0], metrics)
    env = worker_env(args, path) | {"BENCH_STEP_MS": str(args.step_ms)}
    worker.start(env, args.work / f"{run}.log")
    stage1: WorkerProcess | None = None
    stage1_addresses: list[str] = []
    if args.stage1:
        stage1_addresses = [f"127.0.0.1:{ports['stage1'] + i}" for i in range(count1)]
        stage1_step = ports["stage1_metrics"] + (count1 if count1 > 1 else 0)
        stage1 = WorkerProcess(
            "bench.duplex_fanin.cheap_step", STAGE1[1], stage1_addresses[0], stage1_step
        )
        env1 = env | {"BENCH_STAGE": "stage1", "BENCH_STEP_MS": str(args.stage1_step_ms)}
        stage1.start(env1, args.work / f"{run}-stage1.log")
    failures = 0
    try:
        asyncio.run(ready(addresses, worker))
        if stage1 is not None:
            asyncio.run(ready(stage1_addresses, stage1))
        for sessions in args.levels:
            own_counts = {"front_ends": count} | ({"stage1_front_ends": count1} if stage1 else {})
            pids = {"stage0": _pid(worker)} | ({"stage1": _pid(stage1)} if stage1 else {})
            level = own_counts | run_level(
                args, addresses, stage1_addresses, step_port, sessions, pids
            )
            result["levels"].append(level)
            write_json(args.out, result)
            print(line(level), flush=True)
            failures = 0 if level["held"] else failures + 1
            if failures >= args.stop_after_failures:
                break
            time.sleep(1.0)  # the last level's sessions leave
    finally:
        worker.stop()
        if stage1 is not None:
            stage1.stop()


def _pid(worker: WorkerProcess) -> int:
    assert worker.proc is not None
    return worker.proc.pid


def line(lv: dict[str, Any]) -> str:
    s, g, a = lv["step_ms"], lv["frame_gap_ms"], lv["audio_gap_ms"]
    audio = f" audio gap p50/p99 {a['p50']}/{a['p99']} ms," if a else ""
    return (
        f"K={run_key(lv)} N={lv['sessions']:>4} step p50/p99 {s['p50']}/{s['p99']} ms,"
        f" late {lv['late_frames']}, gap p50/p99 {g['p50']}/{g['p99']} ms,{audio}"
        f" frames {lv['frames']}/{lv['frames_expected']}, {lv['messages_per_s']} msg/s,"
        f" CPU % {lv.get('cpu_pct')},"
        f" held {lv['held']} errors {lv['errors'] or '-'}"
    )


def run_key(level: dict[str, Any]) -> str:
    """A run's name: K, or K+K1 with a stage1 of K1 front ends."""
    stage1 = level.get("stage1_front_ends")
    return f"{level['front_ends']}" + (f"+{stage1}" if stage1 else "")


def table(data: dict[str, Any]) -> str:
    stage1 = any(lv.get("audio_gap_ms") for lv in data["levels"])
    lines = [
        f"{data['device']}; {data['checkpoint']}, step: {data['step']};"
        f" window {data['settings']['window_s']} s.",
        "",
        "| K | "
        + ("K stage1 | " if stage1 else "")
        + "N | late frames | frame gap p50 / p99 ms"
        + (" | audio gap p50 / p99 ms" if stage1 else "")
        + " | step p50 / p99 ms | messages/s | held |",
        "| ---: | "
        + ("---: | " if stage1 else "")
        + "---: | ---: | ---: | "
        + ("---: | " if stage1 else "")
        + "---: | ---: | :---: |",
    ]
    for lv in data["levels"]:
        s, g, a = lv["step_ms"], lv["frame_gap_ms"], lv.get("audio_gap_ms")
        own = f"| {lv['front_ends']} | "
        if stage1:
            own += f"{lv.get('stage1_front_ends', 1)} | "
        audio = f" | {a['p50']} / {a['p99']}" if stage1 and a else (" | -" if stage1 else "")
        lines.append(
            f"{own}{lv['sessions']} | {lv['late_frames']} | {g['p50']} / {g['p99']}{audio}"
            f" | {s['p50']} / {s['p99']} | {lv['messages_per_s']}"
            f" | {'yes' if lv['held'] else 'no'} |"
        )
    held = data.get("max_held", {})
    lines += ["", "Most sessions held: " + ", ".join(f"K={k}: {n}" for k, n in held.items())]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    args.out = args.out.resolve()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.work = Path(tempfile.mkdtemp(prefix="duplex-fanin-"))
    print(f"worker profiles and logs in {args.work}", flush=True)
    result: dict[str, Any] = {
        "commit": git_commit(),
        "device": device_name(),
        "date": time.strftime("%Y-%m-%d"),
        "checkpoint": args.checkpoint,
        "step": f"a sleep of {args.step_ms} ms" if args.step_ms else "the model's own",
        "command": "python -m bench.duplex_fanin " + " ".join(sys.argv[1:]),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "table", "work")},
        "versions": {d: version(d) for d in ("torch", "moshi", "grpcio", "protobuf")},
        "levels": [],
    }
    for count in args.counts:
        for count1 in args.stage1_counts if args.stage1 else [1]:
            run_front_ends(args, count, count1, result)
    runs = dict.fromkeys(run_key(lv) for lv in result["levels"])
    result["max_held"] = {
        key: max(
            (lv["sessions"] for lv in result["levels"] if run_key(lv) == key and lv["held"]),
            default=None,
        )
        for key in runs
    }
    write_json(args.out, result)
    print(table(result))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
