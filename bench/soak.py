"""Soak: sessions taking turns for N minutes; RSS per service over time, its slope, errors.

    python -m bench.soak --minutes 30 --sessions 200              # synthetic stages
    python -m bench.soak --minutes 30 --backend cascade           # real models, at capacity

Starts its own stack (`bench.lib.loadstack.LoadStack`: Redis and the four
services as real processes) and keeps `--sessions` sessions busy with
manual-lane turns of the load client (`antiphon.client.load`: paced 200
ms appends, commit, `response.create`, to `response.done`) until the time
is up; a session whose socket dies is replaced by a new one, so the load
holds. Every
`--sample-s` the resident memory of each service's process tree is
sampled (`bench/lib/procstats.py`); after `--warmup-min` (first allocations,
caches filling) the least-squares slope of each is reported in MiB per 10
minutes: flat memory is a slope near 0. Errors are the `error` events by
code, turns that did not complete by status, and sockets lost.

`--backend cascade` without `--sessions` runs at the capacity the last
cascade load run measured (`capacity.sessions` of
`bench/results/load-cascade.json`, which `make bench` writes); without that
file it stops and says so. Results go to
`bench/results/soak-<backend>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from antiphon.client import ClientError
from antiphon.client.load import (
    MANUAL,
    LoadSession,
    Question,
    SessionError,
    manual_question,
    raise_fd_limit,
    run_async,
)
from bench.lib.loadstack import LoadStack, stack_env
from bench.lib.questions import QUESTIONS
from bench.lib.results import RESULTS, command_line, git_commit, write_json
from bench.lib.speech import spoken_or_noise

SERVICES = ("gateway", "session", "stage0", "stage1", "redis")


def slope_per_10min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB) points, in MiB per 10 minutes."""
    if len(points) < 3:
        return None
    t, y = np.array(points).T
    if np.ptp(t) <= 0:
        return None
    return round(float(np.polyfit(t, y, 1)[0]) * 600, 2)


class Soak:
    def __init__(
        self, bench: LoadStack, questions: list[Question], args: argparse.Namespace
    ) -> None:
        self.bench = bench
        self.questions = questions
        self.args = args
        self.turns: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.lost: Counter[str] = Counter()
        self.opened = 0

    async def session(self, index: int, until: float) -> None:
        """One slot of the load: a session taking turns; a new one if it is lost."""
        a = self.args
        turn = 0
        while time.monotonic() < until:
            try:
                s = await LoadSession.open(index, self.bench.url, MANUAL, a.timeout)
            except SessionError as exc:
                self.lost[f"open_{exc.code}"] += 1
                await asyncio.sleep(1.0)
                continue
            self.opened += 1
            try:
                while time.monotonic() < until:
                    q = self.questions[(index + turn) % len(self.questions)]
                    r = await s.turn(turn, q, time.monotonic(), a.timeout, grace_s=0)
                    self.turns[r.status] += 1
                    turn += 1
                    await asyncio.sleep(a.pause_s)
            except (SessionError, ClientError, OSError) as exc:
                self.lost[s.closed_code or type(exc).__name__] += 1
            finally:
                self.errors.update(s.errors)
                await s.close()

    async def run(self) -> list[dict[str, Any]]:
        a = self.args
        t0 = time.monotonic()
        until = t0 + a.minutes * 60
        window = self.bench.sampler.mark()
        samples: list[dict[str, Any]] = []

        async def sample() -> None:
            while True:
                usage = self.bench.sampler.usage(window)
                samples.append(
                    {
                        "t_s": round(time.monotonic() - t0, 1),
                        "rss_mib": {n: usage[n]["rss_mib"] for n in SERVICES if n in usage},
                        "turns": sum(self.turns.values()),
                    }
                )
                await asyncio.sleep(a.sample_s)

        sampler = asyncio.create_task(sample())
        # Opens spread over a few seconds, as users arrive.
        spread = min(10.0, a.sessions * 0.05)

        async def slot(i: int) -> None:
            await asyncio.sleep(spread * i / max(1, a.sessions))
            await self.session(i, until)

        try:
            await asyncio.gather(*(slot(i) for i in range(a.sessions)))
        finally:
            sampler.cancel()
        return samples


def report(samples: list[dict[str, Any]], soak: Soak, warmup_s: float) -> dict[str, Any]:
    after = [s for s in samples if s["t_s"] >= warmup_s] or samples
    rss: dict[str, Any] = {}
    for name in SERVICES:
        points = [(s["t_s"], s["rss_mib"][name]) for s in after if name in s["rss_mib"]]
        if not points:
            continue
        values = [p[1] for p in points]
        rss[name] = {
            "slope_mib_per_10min": slope_per_10min(points),
            "first_mib": values[0],
            "last_mib": values[-1],
            "peak_mib": max(values),
        }
    not_completed = {k: v for k, v in soak.turns.items() if k != "completed"}
    return {
        "rss": rss,
        "turns": dict(soak.turns),
        "sessions_opened": soak.opened,
        "errors": {
            "count": sum(soak.errors.values()) + sum(not_completed.values()),
            "by_code": dict(soak.errors),
            "turns_not_completed": not_completed,
            "sockets_lost": dict(soak.lost),
        },
        "samples": samples,
    }


# make bench's cascade load line: it writes bench/results/load-cascade.json.
CAPACITY_RUN = "python -m bench.load --backend cascade --sessions 1,2,4 --turns 3 --slo-ms 2500"


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--backend", choices=["synthetic", "cascade"], default="synthetic")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sessions", type=int, default=0, help="200 synthetic; capacity cascade")
    parser.add_argument("--pause-s", type=float, default=1.0, help="between a session's turns")
    parser.add_argument("--sample-s", type=float, default=10.0, help="RSS sampling period")
    parser.add_argument("--warmup-min", type=float, default=-1, help="left out of the slope")
    parser.add_argument("--timeout", type=float, default=0.0, help="per response, seconds")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not args.sessions:
        args.sessions = 200 if args.backend == "synthetic" else cascade_capacity()
    args.timeout = args.timeout or (30.0 if args.backend == "synthetic" else 300.0)
    # A tenth of the run, at most 5 minutes, is warm-up unless told otherwise.
    warmup_min = args.warmup_min if args.warmup_min >= 0 else min(5.0, args.minutes / 10)
    out: Path = args.out or RESULTS / f"soak-{args.backend}.json"
    raise_fd_limit(args.sessions * 2 + 256)
    if args.backend == "synthetic":
        # Any sound will do: the synthetic ASR hears its length, not its words.
        pcm = np.random.default_rng(0).normal(0, 3000, 24000).clip(-32768, 32767)
        questions = [manual_question("noise", pcm.astype("<i2").tobytes())]
    else:
        questions = [manual_question(q, spoken_or_noise(q)) for q in QUESTIONS]
    env = stack_env(args.backend, args.sessions + 16)
    bench = LoadStack(args.backend, env)
    try:
        soak = Soak(bench, questions, args)
        samples = run_async(soak.run())
    finally:
        bench.stop()
    result = {
        "backend": args.backend,
        "command": command_line(),
        "commit": git_commit(),
        "minutes": args.minutes,
        "sessions": args.sessions,
        "warmup_min": warmup_min,
        "env": env,
        **report(samples, soak, warmup_min * 60),
    }
    write_json(out, result)
    print(f"soak {args.backend}: {args.sessions} sessions for {args.minutes:g} min")
    print(f"{'service':<10} {'MiB/10min':>10} {'first':>8} {'last':>8} {'peak':>8}")
    for name, r in result["rss"].items():
        slope = r["slope_mib_per_10min"]
        print(
            f"{name:<10} {slope if slope is not None else '-':>10} {r['first_mib']:>8} "
            f"{r['last_mib']:>8} {r['peak_mib']:>8}"
        )
    e = result["errors"]
    print(f"turns {result['turns']}; errors {e['count']} {e['by_code']}; lost {e['sockets_lost']}")
    print(f"written to {out}")


def cascade_capacity(path: Path = RESULTS / "load-cascade.json") -> int:
    """The capacity the last cascade load run measured (`capacity.sessions`, at least 1).

    Without that run there is no capacity to soak at: this says so and how to get
    one, rather than guessing a number."""
    if not path.is_file():
        raise SystemExit(
            f"{path} is not there: measure the cascade's capacity first (`{CAPACITY_RUN}`, "
            "a line of `make bench`) or pass --sessions N"
        )
    try:
        sessions = int(json.loads(path.read_text())["capacity"]["sessions"])
    except (KeyError, ValueError, TypeError) as exc:
        raise SystemExit(
            f"{path} holds no capacity.sessions ({exc!r}): run `{CAPACITY_RUN}`"
        ) from exc
    return max(sessions, 1)


if __name__ == "__main__":
    main()
