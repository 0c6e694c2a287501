"""`python -m bench.faults`: see the package's docstring (bench/faults/__init__.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

import bench.faults
from antiphon.client.load import INPUT_RATE, manual_question, raise_fd_limit, run_async
from bench.faults.client import FaultClient
from bench.faults.cluster import FaultCluster
from bench.faults.plan import faults, run_fault, totals
from bench.lib.results import RESULTS, command_line, git_commit, write_json


async def run(args: argparse.Namespace) -> dict[str, Any]:
    fc = FaultCluster(args.sessions, args.token_ms, args.grace_s)
    t_start = time.monotonic()
    print(f"starting the cluster (logs in {fc.stack.run_dir}) ...", file=sys.stderr)
    await fc.start()
    startup_s = time.monotonic() - t_start
    rng = np.random.default_rng(0)
    # Any sound will do: the synthetic ASR hears its length, not its words.
    pcm = rng.normal(0, 3000, INPUT_RATE * args.audio_ms // 1000).clip(-32768, 32767)
    question = manual_question("noise", pcm.astype("<i2").tobytes())
    clients = [FaultClient(i, fc, question) for i in range(args.sessions)]
    report: dict[str, Any] = {"startup_s": round(startup_s, 1), "faults": []}
    stop = asyncio.Event()
    drivers: list[asyncio.Task[None]] = []
    try:
        gate = asyncio.Semaphore(16)

        async def open_one(c: FaultClient) -> None:
            async with gate:
                await c.open()

        await asyncio.gather(*(open_one(c) for c in clients))
        drivers = [asyncio.create_task(c.run(stop, args.pause_s)) for c in clients]
        await asyncio.sleep(args.warmup_s)
        for fault in faults(fc, clients, args.cut_s, args.redis_pause_s):
            if args.only and fault.name not in args.only and fault.name != "none":
                continue
            print(f"fault: {fault.name} ...", file=sys.stderr)
            result = await run_fault(fault, fc, clients, args.window_s)
            report["faults"].append(result)
            print(f"  {json.dumps(result)}", file=sys.stderr)
            await asyncio.sleep(args.settle_s)
        stop.set()
        await asyncio.gather(*drivers)
        await asyncio.gather(*(c.finish() for c in clients))
    finally:
        stop.set()
        for task in drivers:
            task.cancel()
        await fc.stop()
    turns: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for c in clients:
        turns.update(c.turns)
        errors.update(c.ledger.errors)
    report["totals"] = {
        **totals(clients),
        "stuck": sum(c.ledger.stuck() for c in clients),
        "sessions_failed": {c.index: c.failed for c in clients if c.failed},
        "turns": dict(turns),
        "errors": dict(errors),
        "events": sum(len(c.ledger.seqs) for c in clients),
        "responses": sum(len(c.ledger.created) for c in clients),
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.faults", description=(bench.faults.__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--audio-ms", type=int, default=1000, help="audio per turn")
    parser.add_argument("--pause-s", type=float, default=0.5, help="between a session's turns")
    parser.add_argument("--token-ms", type=int, default=100, help="the scripted LLM's pace")
    parser.add_argument("--grace-s", type=float, default=30.0, help="disconnect grace")
    parser.add_argument("--cut-s", type=float, default=5.0, help="how long the link is cut")
    parser.add_argument(
        "--redis-pause-s", type=float, default=10.0, help="how long Redis is paused (SIGSTOP)"
    )
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--window-s", type=float, default=60.0, help="most a recovery may take")
    parser.add_argument("--settle-s", type=float, default=3.0, help="after each fault")
    parser.add_argument("--only", nargs="*", default=[], help="fault names to run")
    parser.add_argument("--out", type=Path, default=RESULTS / "faults.json")
    args = parser.parse_args()
    raise_fd_limit(args.sessions * 4 + 256)
    report = {
        "command": command_line(),
        "commit": git_commit(),
        "sessions": args.sessions,
        **run_async(run(args)),
    }
    write_json(args.out, report)
    print(f"{'fault':<36} {'victim':<10} {'lost':>4} {'rep':>4} {'stuck':>5} "
          f"{'recovered':>9} {'p50 s':>6} {'max s':>6}")  # fmt: skip
    for f in report["faults"]:
        rec = f["recovery_s"]
        print(
            f"{f['fault']:<36} {f['victim'] or '-':<10} {f['lost']:>4} {f['repeated']:>4} "
            f"{f['stuck']:>5} {f['recovered_sessions']:>4}/{f['sessions']:<4} "
            f"{rec['p50'] if rec['p50'] is not None else '-':>6} "
            f"{rec['max'] if rec['max'] is not None else '-':>6}"
        )
    t = report["totals"]
    print(
        f"total: {t['lost']} lost, {t['repeated']} repeated, {t['stuck']} stuck of "
        f"{t['events']} events and {t['responses']} responses; "
        f"{len(t['sessions_failed'])} sessions failed; turns {t['turns']}"
    )
    print(f"written to {args.out}")
    ok = not (t["lost"] or t["repeated"] or t["stuck"] or t["sessions_failed"])
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
