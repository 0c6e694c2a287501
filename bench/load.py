"""Load generator: N concurrent Realtime sessions with real paced audio, per level.

    python bench/load.py --backend synthetic --sessions 1,50,200,500
    python bench/load.py --backend cascade --sessions 1,4 --turns 3

Starts its own stack (`LocalStack`: Redis and the four services as real
processes) and, for each level, opens that many sessions over real
WebSockets (`turn_detection: null`). Each session streams spoken PCM16
24 kHz in 200 ms appends in real time, commits, sends `response.create` and
reads to `response.done`, `--turns` times; a `session.heartbeat` goes out
mid-utterance. Measured on the client's monotonic clock, per level:

- commit -> first audio delta p50/p95/p99, commit -> response.done;
- audio chunk gap max: the largest gap between two audio deltas of a response;
- heartbeat -> heartbeat_ack round trip, and the gaps between consecutive
  server events of a response;
- errors by code, refused opens by code (`duplex_session_busy`, ...);
- CPU seconds, CPU % of one core and peak RSS per service process tree
  (sampled every 0.5 s), and the load generator's own.

`--backend synthetic` sets the scripted stage clocks to zero (no ASR, TTFT
or token time), so what is left is the serving path itself: gateway,
session actor, gRPC hops and Redis writes. Its `overhead` block is that
path per event: commit -> first audio, heartbeat round trip and gaps
between events, p50/p99. `--backend cascade` runs the real models.

`--barge-in` adds trials on the `server_vad` lane: the client speaks again
as soon as the answer's first audio arrives and measures speech onset sent
-> `response.done` (cancelled) and -> that response's last audio delta.

The server limits (max_sessions, stage capacity) are raised to the largest
level, so the serving path is measured, not admission. Results go to
`--out` (JSON) and a PNG of the latency distributions beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "deploy" / "local")]

import numpy as np  # noqa: E402
from stack import LocalStack, Ports  # noqa: E402
from tqdm import tqdm  # noqa: E402

from bench.loadclient import (  # noqa: E402
    CHUNK_MS,
    MANUAL,
    SERVER_VAD,
    LoadSession,
    SessionError,
    TurnResult,
    append_messages,
    barge_in_trial,
)
from bench.loadreport import plot, print_table, stats, summarize_level  # noqa: E402
from bench.procstats import ProcSampler  # noqa: E402

QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "What color is the sky on a clear day?",
    "Can you name a fruit that is yellow?",
    "What is two plus two?",
]
# The barge-in trials ask for a long answer, and interrupt it.
LONG_ANSWER = "Tell me a long story about a brave knight and a dragon."
BARGE = "Wait, stop. Tell me something else instead."


# ------------------------------------------------------------------ audio
def speech(text: str) -> bytes:
    """Spoken PCM16 24 kHz (Piper); a noise burst if the voice is not installed."""
    try:
        from tests.support.speech import spoken

        return spoken(text)
    except Exception as exc:  # the voice assets are missing: any sound will do for synthetic
        print(f"no Piper voice ({exc}); using noise bursts", file=sys.stderr)
        rng = np.random.default_rng(len(text))
        n = 24000 * (600 + 40 * len(text)) // 1000
        return (rng.normal(0, 3000, n).clip(-32768, 32767).astype("<i2")).tobytes()


def trim_leading_silence(pcm16: bytes, threshold: int = 500) -> bytes:
    samples = np.frombuffer(pcm16, dtype="<i2")
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > threshold)
    return pcm16[int(loud[0]) * 2 :] if loud.size else pcm16


# ------------------------------------------------------------------ stack
def stack_env(backend: str, limit: int, barge: bool = False) -> dict[str, str]:
    env = {
        # The serving path is measured, not admission: room for every session.
        "ANTIPHON_MAX_SESSIONS": str(limit),
        "ANTIPHON_CAPACITY": str(limit),
        # A session whose socket died frees its slot soon (the next level needs it).
        "ANTIPHON_DISCONNECT_GRACE_S": "5",
    }
    if backend == "synthetic":
        env["ANTIPHON_BACKEND"] = "synthetic"
        if barge:
            # The scripted answer's last clause comes one token after its first audio:
            # at one word a second, that leaves a second for the barge-in to cancel it.
            env["ANTIPHON_SYNTHETIC_TOKEN_MS"] = "1000"
        else:
            # Stages answer at once: what remains is the serving path's own cost.
            env |= {
                "ANTIPHON_SYNTHETIC_ASR_MS": "0",
                "ANTIPHON_SYNTHETIC_TTFT_MS": "0",
                "ANTIPHON_SYNTHETIC_TOKEN_MS": "0",
            }
    return env


class Bench:
    def __init__(self, backend: str, env: dict[str, str]) -> None:
        self.env = env
        self.stack = LocalStack(ports=Ports.free(), extra_env=env)
        t0 = time.monotonic()
        print(f"starting the {backend} stack (logs in {self.stack.run_dir}) ...", file=sys.stderr)
        try:
            self.stack.start(timeout_s=600)
        except BaseException:
            self.stack.stop()
            raise
        self.startup_s = round(time.monotonic() - t0, 1)
        pids = {name: p.pid for name, p in self.stack.procs.items()}
        self.sampler = ProcSampler(
            {**pids, "loadgen": os.getpid()}, alone=frozenset({"loadgen"})
        ).start()

    def sessions_active(self) -> int | None:
        """The session replica's own count of the sessions it runs (its metrics)."""
        url = f"http://127.0.0.1:{self.stack.ports.session_metrics}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("antiphon_session_sessions_active "):
                return int(float(line.split()[1]))
        return None

    def drain(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Until the last level's sessions have all ended on the server (or `timeout_s`)."""
        t0 = time.monotonic()
        active = self.sessions_active()
        while active and time.monotonic() - t0 < timeout_s:
            time.sleep(0.5)
            active = self.sessions_active()
        return {"drain_s": round(time.monotonic() - t0, 1), "sessions_left": active}

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.stack.ports.gateway}/v1/realtime"

    def stop(self) -> None:
        self.sampler.stop()
        self.stack.stop()


# ------------------------------------------------------------------ runs
async def loop_lag(samples: list[float], period_s: float = 0.1) -> None:
    """How late this event loop wakes up: the client's own share of any latency."""
    while True:
        t = time.monotonic()
        await asyncio.sleep(period_s)
        samples.append((time.monotonic() - t - period_s) * 1000)


async def run_level(
    bench: Bench,
    n: int,
    turns: int,
    frames: Callable[[int, int], Sequence[str]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    window = bench.sampler.mark()
    lag: list[float] = []
    lag_task = asyncio.create_task(loop_lag(lag))
    bar = tqdm(total=n * turns, desc=f"{args.backend} x{n}", unit="turn", file=sys.stderr)
    refused: Counter[str] = Counter()
    aborted: Counter[str] = Counter()
    open_ms: list[float] = []
    results: list[TurnResult] = []
    gate = asyncio.Semaphore(args.open_concurrency)

    async def open_one(i: int) -> LoadSession | None:
        async with gate:
            t0 = time.monotonic()
            try:
                s = await LoadSession.connect(i, bench.url, args.deflate, args.timeout)
            except SessionError as exc:
                refused[exc.code] += 1
                return None
            try:
                await s.open(MANUAL, args.timeout)
            except SessionError as exc:
                refused[exc.code] += 1
                await s.close(1.0)
                return None
            open_ms.append((time.monotonic() - t0) * 1000)
            bar.set_postfix_str(f"opened {len(open_ms)}/{n}", refresh=False)
            return s

    opened = [s for s in await asyncio.gather(*(open_one(i) for i in range(n))) if s is not None]
    bar.set_postfix_str(f"{len(opened)} open, {sum(refused.values())} refused")
    lengths = [len(frames(s.index, 0)) for s in opened]
    spread_s = (max(lengths, default=1) * CHUNK_MS) / 1000
    t_start = time.monotonic() + 0.5

    async def drive(k: int, s: LoadSession) -> None:
        # Start times spread over one utterance, so commits do not all land together.
        start_at = t_start + spread_s * k / max(1, len(opened))
        for t in range(turns):
            try:
                r = await s.turn(t, frames(s.index, t), start_at, args.timeout)
            except SessionError as exc:
                aborted[exc.code] += 1
                bar.update(turns - t)
                return
            except Exception as exc:  # the socket went away mid-send
                aborted[s.closed_code or type(exc).__name__] += 1
                bar.update(turns - t)
                return
            results.append(r)
            bar.update(1)
            if r.status == "timeout":  # counted as `response_timeout`; the session gives up
                bar.update(turns - t - 1)
                return
            start_at = time.monotonic()

    t_turns = time.monotonic()
    await asyncio.gather(*(drive(k, s) for k, s in enumerate(opened)))
    turns_wall = time.monotonic() - t_turns
    await asyncio.gather(*(s.close() for s in opened))
    bar.close()
    lag_task.cancel()
    errors: Counter[str] = Counter()
    for s in opened:
        errors.update(s.errors)
    return summarize_level(
        n=n,
        turns=turns,
        opened=len(opened),
        refused=refused,
        aborted=aborted,
        errors=errors,
        open_ms=open_ms,
        results=results,
        turns_wall_s=turns_wall,
        lag_ms=lag,
        usage=bench.sampler.usage(window),
        synthetic=args.backend == "synthetic",
    )


async def run_barge_in(bench: Bench, trials: int, args: argparse.Namespace) -> dict[str, Any]:
    silence = append_messages(b"\x00\x00" * (24000 * CHUNK_MS // 1000))[0]
    question = append_messages(speech(LONG_ANSWER))
    barge = append_messages(trim_leading_silence(speech(BARGE)))
    out: list[dict[str, Any]] = []
    for _ in tqdm(range(trials), desc=f"{args.backend} barge-in", unit="trial", file=sys.stderr):
        try:
            s = await LoadSession.connect(0, bench.url, args.deflate, args.timeout)
        except SessionError as exc:
            out.append({"status": "error", "note": exc.code})
            continue
        try:
            await s.open(SERVER_VAD, args.timeout)
            out.append(await barge_in_trial(s, question, barge, silence, args.timeout))
        except SessionError as exc:
            out.append({"status": "error", "note": exc.code})
        finally:
            await s.close()
        await asyncio.sleep(0.5)
    cancelled = [t for t in out if t.get("status") == "cancelled"]
    statuses = Counter(str(t.get("status")) for t in out)
    result: dict[str, Any] = {"trials": out, "statuses": dict(statuses)}
    if cancelled:
        done = [t["onset_to_done_ms"] for t in cancelled]
        last = [t["onset_to_last_audio_ms"] for t in cancelled]
        # From sending the first 200 ms frame that holds speech: the server has
        # the whole frame at once. A live microphone heard that onset one frame
        # earlier, hence `barge_in_from_capture_ms`.
        result["barge_in_ms"] = stats(done, 50, 95)
        result["barge_in_from_capture_ms"] = stats([d + CHUNK_MS for d in done], 50, 95)
        # The last audio delta of the cancelled response, after the onset (0: none after).
        result["audio_stop_ms"] = stats(last, 50, 95)
    else:
        result["barge_in_ms"] = None
        result["barge_in_from_capture_ms"] = None
        result["audio_stop_ms"] = None
        result["note"] = (
            f"the server never cancelled a response on barge-in speech ({dict(statuses)}): "
            "barge-in on the server_vad lane is not implemented, or the answer ended first"
        )
    if len(cancelled) not in (0, len(out)):
        result["note"] = f"only {len(cancelled)}/{len(out)} responses were cancelled"
    return result


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < needed:
        print(f"warning: open-file limit {soft} < {needed} needed", file=sys.stderr)
    return soft


def capacity(levels: list[dict[str, Any]], slo_ms: float) -> dict[str, Any]:
    """The largest level served in real time: every turn answered, no errors,
    first audio p95 within the SLO. This is the number a worker's `capacity`
    setting should hold (the measurement behind it, not a guess)."""
    served = [
        lv["sessions"]
        for lv in levels
        if lv["turns_completed"] == lv["turns_expected"]
        and not lv["errors"]["count"]
        and (lv["commit_to_first_audio_ms"] or {}).get("p95", float("inf")) <= slo_ms
    ]
    return {"slo_ms": slo_ms, "sessions": max(served, default=0)}


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_async(coro: Coroutine[Any, Any, Any]) -> Any:
    """On uvloop when installed (as the gateway runs): less client overhead per event."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["synthetic", "cascade"], default="synthetic")
    parser.add_argument("--sessions", default="1,50,200,500", help="levels, comma-separated")
    parser.add_argument("--turns", type=int, default=3, help="turns per session")
    parser.add_argument("--barge-in", action="store_true", help="also measure barge-in")
    parser.add_argument("--barge-in-trials", type=int, default=3)
    parser.add_argument("--fresh-stack", action="store_true", help="a new stack per level")
    parser.add_argument("--open-concurrency", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=0.0, help="per response, seconds")
    parser.add_argument("--deflate", action="store_true", help="permessage-deflate on")
    parser.add_argument(
        "--slo-ms",
        type=float,
        default=0.0,
        help="report the capacity: the most sessions whose first-audio p95 stays within this",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    levels = [int(x) for x in args.sessions.split(",") if x.strip()]
    args.timeout = args.timeout or (30.0 if args.backend == "synthetic" else 300.0)
    out: Path = args.out or REPO / "bench" / "results" / f"load-{args.backend}.json"
    fd_limit = raise_fd_limit(max(levels) * 2 + 256)

    print("preparing speech ...", file=sys.stderr)
    per_question = [append_messages(speech(q)) for q in QUESTIONS]

    def frames(session: int, turn: int) -> Sequence[str]:
        return per_question[(session + turn) % len(per_question)]

    # Room for every session of every level at once: sessions a level leaves
    # behind (a socket that died) hold their slot until they are reaped.
    limit = max(4, sum(levels) + 16)
    report: dict[str, Any] = {
        "backend": args.backend,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": git_commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_before": [round(x, 2) for x in os.getloadavg()],
            "open_files_limit": fd_limit,
        },
        "turns_per_session": args.turns,
        "audio_ms_per_turn": [len(f) * CHUNK_MS for f in per_question],
        "env": stack_env(args.backend, limit),
        "levels": [],
    }
    bench: Bench | None = None
    try:
        for n in levels:
            if bench is None or args.fresh_stack:
                if bench is not None:
                    bench.stop()
                bench = Bench(args.backend, stack_env(args.backend, limit))
                report.setdefault("startup_s", bench.startup_s)
            level = run_async(run_level(bench, n, args.turns, frames, args))
            # Closed sessions finish their cleanup before the next level starts.
            level["after"] = bench.drain()
            report["levels"].append(level)
            print_table(args.backend, [level], header=len(report["levels"]) == 1)
        if args.barge_in:
            env = stack_env(args.backend, limit, barge=True)
            if bench is None or env != bench.env:
                if bench is not None:
                    bench.stop()
                bench = Bench(args.backend, env)
            report["barge_in"] = run_async(run_barge_in(bench, args.barge_in_trials, args))
            report["barge_in"]["env"] = env
    finally:
        if bench is not None:
            bench.stop()
        if args.slo_ms:
            report["capacity"] = capacity(report["levels"], args.slo_ms)
        out.parent.mkdir(parents=True, exist_ok=True)
        report["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        out.write_text(json.dumps(report, indent=2))
        if report["levels"]:
            plot(report, out.with_suffix(".png"))
    print_table(args.backend, report["levels"], header=True)
    if "barge_in" in report:
        b = report["barge_in"]
        print(f"barge-in: {b['barge_in_ms']} audio stop: {b['audio_stop_ms']} {b.get('note', '')}")
    if "capacity" in report:
        c = report["capacity"]
        print(f"capacity: {c['sessions']} sessions within first-audio p95 <= {c['slo_ms']} ms")
    print(f"written to {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
