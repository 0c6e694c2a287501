"""The serving path's throughput with the journal batched per mailbox drain, and not.

Every event a session sends is journaled in Redis before it is sent. Since
issue 47 the events one mailbox drain makes go to Redis in one pipelined
round trip with the snapshot (`journal_batching`, on by default); before,
each event was a round trip of its own. This runs the same fixed load on
the synthetic stages (no model time: what is left is gateway, session actor,
gRPC hops and Redis) once each way, back to back on one machine, and
reports per mode:

- events per second the clients received, and per CPU second of the session
  process (what one session process could carry on one core);
- the session process's and Redis's CPU % of one core;
- journal round trips per second and events per round trip (the session's
  own histogram), and the round trip's p50/p99;
- turns completed and their commit -> response.done p50/p99.

    python -m bench.journal --sessions 100 --seconds 30

Writes bench/results/journal.json.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from antiphon.client.load import (
    INPUT_RATE,
    MANUAL,
    LoadSession,
    Question,
    SessionError,
    manual_question,
    raise_fd_limit,
    run_async,
)
from bench.lib.loadstack import LoadStack, stack_env
from bench.lib.machine import device_name
from bench.lib.prometheus import bucket_quantile, histogram_delta, scrape
from bench.lib.results import RESULTS, command_line, git_commit, write_json
from bench.lib.stats import pct

MODES = {"per_event": "false", "per_drain": "true"}


class Driver:
    """One session asking for answers back to back; counts every frame it reads."""

    def __init__(self, session: LoadSession) -> None:
        self.session = session
        self.frames = 0
        self.done_ms: list[float] = []
        self.errors = 0
        session.client.add_listener(self._count)

    def _count(self, _event: object) -> None:
        self.frames += 1

    async def run(self, question: Question, stop: asyncio.Event) -> None:
        turn = 0
        while not stop.is_set():
            try:
                r = await self.session.turn(turn, question, time.monotonic(), 60, grace_s=0)
            except SessionError:
                self.errors += 1
                return
            if r.status == "completed" and r.done_ms is not None:
                self.done_ms.append(r.done_ms)
            else:
                self.errors += 1
            turn += 1


def journal_figures(before: dict[str, Any], after: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Round trips and events per round trip over the window, from the session's histograms."""
    batch = histogram_delta(before, after, "antiphon_session_journal_batch_events")
    latency = histogram_delta(before, after, "antiphon_session_journal_append_seconds")
    trips = batch["calls"]
    return {
        "round_trips_per_s": round(trips / wall_s, 1),
        "events_per_round_trip": round(batch["sum"] / trips, 2) if trips else None,
        "round_trip_p50_ms": _ms(bucket_quantile(latency, 0.5)),
        "round_trip_p99_ms": _ms(bucket_quantile(latency, 0.99)),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 2)


async def measure(mode: str, args: argparse.Namespace, question: Question) -> dict[str, Any]:
    env = stack_env("synthetic", args.sessions) | {"ANTIPHON_JOURNAL_BATCHING": MODES[mode]}
    load = LoadStack("synthetic", env)
    try:
        sessions = [await LoadSession.open(k, load.url, MANUAL, 30) for k in range(args.sessions)]
        drivers = [Driver(s) for s in sessions]
        stop = asyncio.Event()
        tasks = [asyncio.create_task(d.run(question, stop)) for d in drivers]
        await asyncio.sleep(args.warmup_s)
        ports = load.stack.session_metrics_ports
        frames0, metrics0 = sum(d.frames for d in drivers), scrape(ports)
        window = load.sampler.mark()
        t0 = time.monotonic()
        await asyncio.sleep(args.seconds)
        wall_s = time.monotonic() - t0
        usage = load.sampler.usage(window)
        frames1, metrics1 = sum(d.frames for d in drivers), scrape(ports)
        stop.set()
        await asyncio.wait(tasks, timeout=90)
        for s in sessions:
            await s.close()
    finally:
        load.stop()
    events = frames1 - frames0
    session_cpu_s = usage["session"]["cpu_s"]
    done = [ms for d in drivers for ms in d.done_ms]
    return {
        "events_per_s": round(events / wall_s, 1),
        "events_per_session_cpu_s": round(events / session_cpu_s, 1) if session_cpu_s else None,
        "session_cpu_pct": usage["session"]["cpu_pct"],
        "redis_cpu_pct": usage["redis"]["cpu_pct"],
        "gateway_cpu_pct": usage["gateway"]["cpu_pct"],
        "machine_cpu_pct": usage["machine"]["cpu_pct"],
        **journal_figures(metrics0, metrics1, wall_s),
        "turns": len(done),
        "done_p50_ms": pct(done, 50),
        "done_p99_ms": pct(done, 99),
        "errors": sum(d.errors for d in drivers),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    # Any sound will do: the synthetic ASR hears its length, not its words.
    pcm = rng.normal(0, 3000, INPUT_RATE * args.audio_ms // 1000).clip(-32768, 32767)
    question = manual_question("noise", pcm.astype("<i2").tobytes())
    modes: dict[str, Any] = {}
    for mode in MODES:
        print(f"{mode}: {args.sessions} sessions for {args.seconds} s ...", file=sys.stderr)
        modes[mode] = await measure(mode, args, question)
        print(f"  {modes[mode]}", file=sys.stderr)
    before, after = modes["per_event"], modes["per_drain"]

    def ratio(key: str) -> float | None:
        a, b = after.get(key), before.get(key)
        return round(a / b, 2) if a and b else None

    return {
        "what": "the serving path (synthetic stages) with the journal per event and per drain",
        "device": device_name(),
        "commit": git_commit(),
        "command": command_line(),
        "sessions": args.sessions,
        "seconds": args.seconds,
        "modes": modes,
        "per_drain_over_per_event": {
            "events_per_s": ratio("events_per_s"),
            "events_per_session_cpu_s": ratio("events_per_session_cpu_s"),
            "round_trips_per_s": ratio("round_trips_per_s"),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30.0, help="measured, per mode")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--audio-ms", type=int, default=600, help="each question's length")
    parser.add_argument("--out", default=str(RESULTS / "journal.json"))
    args = parser.parse_args()
    raise_fd_limit(4 * args.sessions)
    report = run_async(run(args))
    write_json(Path(args.out), report)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
