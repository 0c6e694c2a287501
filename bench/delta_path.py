"""Time to first delta while other sessions stream: the stage0 worker's per-token path, on CPU.

    python -m bench.delta_path --levels 32,64,128,192 --token-ms 7 --rounds 4 --compare

Issue 14: on the H200 our worker's TTFT p95 at 128 sessions is 1.5x raw
vLLM's, while vLLM's own TTFT inside the worker equals raw. Every token of
every session is one `GenerationDelta` through the worker's one event loop
(responder.py `Responder.answer` -> the binding's outbox -> a grpc aio stream write),
so a new request's first token may wait behind the other sessions' deltas.
This bench shows that without a GPU: stage0 runs as a real gRPC worker
(`python -m antiphon.stage0.main`, as bench.gpu starts it) on the
`synthetic` backend, whose scripted LLM answers after `--ttft-ms` and then
one word per `--token-ms` step of one clock for all sessions
(`synthetic_step_clock`), as a batching engine produces them: a worker that
falls behind slows no answer, and an answer read late gets the words it
missed in one delta, as vLLM's are (`--no-step-clock`: each answer's next
word `--token-ms` after its last was taken, so a busy worker also slows its
own load). N sessions (bench.gpu's `BenchSession`, on the worker's own
`Bind` stream) each ask, read the whole answer (`--max-tokens` words, from a
long question the script quotes back), and ask again at once, from staggered
starts: every request meets the other sessions mid-answer (`--burst-s`:
all at once instead, every so often, as bench.gpu asks). `--probes` of
them run in a client process of their own, which keeps up with its few
streams: their TTFT is the worker's, not a busy client's.

Per level and arm: TTFT as the session sees it (`generate` sent -> first
delta received) p50/p95/p99 over the turns sent after `--warm-s`, the delta
messages and tokens the clients received per second, deltas per answer, and
the CPU of the worker and of the client processes. `--compare` starts two
workers, one coalescing deltas (the default) and one with
`ANTIPHON_COALESCE_DELTAS=false`, and runs every level on both, alternating
which goes first; `--no-coalesce` runs only the latter.

The box is shared: `others` is the CPU every other process used meanwhile;
`--rounds` alternate the arms so that both see the same neighbours.

Measured on the 2-core dev box, quiet (others 0%), the command above
(150-word answers at 7 ms a word, ~143 tokens/s a session as on the H200;
20 ms synthetic TTFT), TTFT p95 coalesced / per-token: 32 sessions (4.5k
deltas/s) 21.8 / 22.0 ms, 64 (9.0k/s) 22.2 / 22.2, 128 (17.7k/s) 24.6 /
24.9, 192 (26k/s) 32.4 / 32.7. The worker spends ~27 us of CPU per delta
message (61% of a core at 128), nearly all in grpc's write path, yet the
delta rate barely reaches TTFT: 128 sessions at a fifth of the deltas (30
words at 35 ms, the same requests per second) give the same p95, 24.6 ms.
Every stream keeps up with its one token per step, so coalescing merges 2-4%
of the deltas and changes no TTFT; past the worker's ~33k messages/s (320
sessions) per-token answers fall behind (1.40 s for a 1.06 s answer) while
coalesced ones keep time (1.09 s, 96 messages for 150 words). With
`--burst-s 1.6` at 128, the probes' p95 is 25 ms but the 124 sessions of the
one load process see 41-52 ms: a client process reading many streams adds
its own wait (36 ms over 4 processes).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing as mp
import random
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import grpc
import psutil

from antiphon.common.grpcserver import CHANNEL_OPTIONS
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2_grpc
from bench.gpu.sessions import BenchSession, Turn
from bench.gpu.worker import Worker, standalone_env
from bench.lib.machine import device_name, free_port, now
from bench.lib.procstats import machine_busy_s
from bench.lib.results import RESULTS, write_json
from bench.lib.stats import pct

# The scripted LLM says "You said: <question>. Thank you." one word at a time.
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
ARMS = {"coalesced": "true", "per-token": "false"}


def question(words: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(words))


def worker_env(
    args: argparse.Namespace, port: int, metrics_port: int, coalesce: str
) -> dict[str, str]:
    env = standalone_env(port, metrics_port)
    env.update(
        ANTIPHON_BACKEND="synthetic",
        ANTIPHON_SYNTHETIC_TTFT_MS=str(args.ttft_ms),
        ANTIPHON_SYNTHETIC_TOKEN_MS=str(args.token_ms),
        ANTIPHON_SYNTHETIC_STEP_CLOCK=str(args.step_clock).lower(),
        ANTIPHON_SHUTDOWN_GRACE_S="2",
        ANTIPHON_CAPACITY=str(max(args.levels) + 1),
        ANTIPHON_LLM_MAX_OUTPUT_TOKENS=str(args.max_tokens),
        ANTIPHON_COALESCE_DELTAS=coalesce,
    )
    return env


# ------------------------------------------------------------------ client
async def _converse(
    s: BenchSession, args: Any, start: float, end: float, out: list[dict[str, Any]]
) -> None:
    """Ask, read the whole answer, ask again, from a staggered start until `end`;
    with `--burst-s`, every session asks at once, every `burst_s`."""
    if not args.burst_s:
        # Spread over one answer's length, so the level starts mid-stream.
        offset = random.Random(s.index).uniform(0, args.answer_s)
        await asyncio.sleep(max(0.0, start + offset - now()))
    messages = [
        cpb.ChatMessage(role="system", content="Repeat the question."),
        cpb.ChatMessage(role="user", content=question(args.max_tokens)),
    ]
    k = 0
    while now() < end and not s.failed:
        if args.burst_s:
            await asyncio.sleep(max(0.0, start + k * args.burst_s - now()))
        turn = Turn(s.index, k)
        sent = now()
        try:
            await s.answer(messages, turn, args)
        except Exception as exc:
            turn.error = f"generate: {exc!r}"[:200]
        out.append(asdict(turn) | {"sent": sent, "completed": turn.completed})
        k += 1


async def drive(address: str, indexes: list[int], args: Any, barrier: Any) -> dict[str, Any]:
    options = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
    channels = [
        grpc.aio.insecure_channel(address, options=options)
        for _ in range(max(1, math.ceil(len(indexes) / 64)))
    ]
    sessions = [
        BenchSession(stage_pb2_grpc.Stage0ServiceStub(channels[k % len(channels)]), i, args.tag)
        for k, i in enumerate(indexes)
    ]
    records: list[dict[str, Any]] = []
    try:
        await asyncio.gather(*(s.open(vad=False) for s in sessions))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, barrier.wait, 120)
        start = now() + 0.1
        cpu0 = time.process_time()
        await asyncio.gather(
            *(_converse(s, args, start, start + args.seconds, records) for s in sessions)
        )
        cpu_s = time.process_time() - cpu0
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
        for ch in channels:
            await ch.close()
    return {"records": records, "cpu_s": cpu_s, "start": start}


def _client_main(
    address: str, indexes: list[int], args: dict[str, Any], barrier: Any, results: Any
) -> None:
    try:
        results.put(asyncio.run(drive(address, indexes, argparse.Namespace(**args), barrier)))
    except BaseException as exc:
        results.put({"records": [], "cpu_s": 0.0, "start": 0.0, "error": repr(exc)[:300]})
        raise


def run_clients(address: str, sessions: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The probes in a process of their own (a reader that keeps up: its TTFT is the
    worker's), the other sessions over `--client-procs` processes."""
    probes = list(range(min(args.probes, sessions)))
    rest = list(range(len(probes), sessions))
    procs = max(1, min(args.client_procs, len(rest)))
    shares = [s for s in [probes, *(rest[k::procs] for k in range(procs))] if s]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(shares))
    results = ctx.Queue()
    plain = {k: v for k, v in vars(args).items() if isinstance(v, str | int | float | list)}
    workers = [
        ctx.Process(target=_client_main, args=(address, share, plain, barrier, results))
        for share in shares
    ]
    for w in workers:
        w.start()
    out = [results.get(timeout=args.seconds + 300) for _ in workers]
    for w in workers:
        w.join(30)
    return out


# ------------------------------------------------------------------ levels
def measured(args: argparse.Namespace, run: dict[str, Any]) -> list[dict[str, Any]]:
    """The turns of one run sent inside its window (after the warm-up)."""
    start = min(p["start"] for p in run["parts"] if p["start"]) + args.warm_s
    end = start - args.warm_s + args.seconds
    return [r for p in run["parts"] for r in p["records"] if start <= r["sent"] < end]


def summarize(
    sessions: int, args: argparse.Namespace, runs: list[dict[str, Any]]
) -> dict[str, Any]:
    """One level of one arm, its rounds' turns pooled."""
    turns = [r for run in runs for r in measured(args, run)]
    done = [r for r in turns if r["completed"]]
    ttft = [r["ttft_ms"] for r in done if r["ttft_ms"] is not None]
    probe = [r["ttft_ms"] for r in done if r["ttft_ms"] is not None and r["session"] < args.probes]
    window = len(runs) * (args.seconds - args.warm_s)
    wall = sum(run["wall_s"] for run in runs)
    deltas = sum(r["deltas"] for r in done)
    tokens = sum(r["tokens"] for r in done)

    def share(key: str) -> int:
        return round(100 * sum(run[key] for run in runs) / wall)

    return {
        "sessions": sessions,
        "rounds": len(runs),
        "ttft_ms": {"p50": pct(ttft, 50), "p95": pct(ttft, 95), "p99": pct(ttft, 99)},
        "probe_ttft_ms": {"p50": pct(probe, 50), "p95": pct(probe, 95), "p99": pct(probe, 99)},
        "probe_turns": len(probe),
        "engine_ttft_ms_p95": pct([r["stage_ttft_ms"] for r in done], 95),
        "turns": len(turns),
        "completed": len(done),
        "errors": sorted({r["error"] for r in turns if r["error"]})[:3],
        "deltas_per_s": round(deltas / window),
        "tokens_per_s": round(tokens / window),
        "deltas_per_answer": round(deltas / len(done), 1) if done else None,
        "tokens_per_answer": round(tokens / len(done), 1) if done else None,
        "answer_ms_p50": pct([r["generate_ms"] for r in done], 50),
        # Shares of one core over the runs' wall time (opening and closing included).
        "worker_cpu_pct": share("worker_cpu_s"),
        "clients_cpu_pct": share("clients_cpu_s"),
        # Every other process of the machine: a shared box's noise.
        "others_cpu_pct": share("others_cpu_s"),
    }


def run_round(worker: Worker, sessions: int, args: argparse.Namespace) -> dict[str, Any]:
    proc = psutil.Process(worker.proc.pid)
    me = psutil.Process()
    t0, busy0 = now(), machine_busy_s()
    cpu0 = sum(proc.cpu_times()[:2])
    # This process and its client processes, whole (their start included).
    mine0 = sum(me.cpu_times())
    parts = run_clients(worker.address, sessions, args)
    worker_s = sum(proc.cpu_times()[:2]) - cpu0
    clients_s = sum(p["cpu_s"] for p in parts)
    busy = machine_busy_s() - busy0
    mine = sum(me.cpu_times()) - mine0
    return {
        "parts": parts,
        "wall_s": now() - t0,
        "worker_cpu_s": worker_s,
        "clients_cpu_s": clients_s,
        "others_cpu_s": max(0.0, busy - worker_s - mine),
    }


def print_level(arm: str, lv: dict[str, Any]) -> None:
    t, pr = lv["ttft_ms"], lv["probe_ttft_ms"]
    print(
        f"{arm:>10} N={lv['sessions']:>4} x{lv['rounds']}"
        f" ttft p50/p95/p99 {t['p50']}/{t['p95']}/{t['p99']} ms"
        f" probes {pr['p50']}/{pr['p95']}/{pr['p99']} ms"
        f" deltas/s {lv['deltas_per_s']} tokens/s {lv['tokens_per_s']}"
        f" deltas/answer {lv['deltas_per_answer']} answer {lv['answer_ms_p50']} ms"
        f" cpu worker/clients/others {lv['worker_cpu_pct']}/{lv['clients_cpu_pct']}"
        f"/{lv['others_cpu_pct']}%"
        f" done {lv['completed']}/{lv['turns']} {lv['errors'] or ''}",
        flush=True,
    )


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.delta_path",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--levels", type=lambda s: [int(x) for x in s.split(",")], default=[32, 64, 128]
    )
    ap.add_argument("--token-ms", type=float, default=7.0, help="synthetic pace per word")
    ap.add_argument("--ttft-ms", type=float, default=20.0, help="synthetic time to first word")
    ap.add_argument(
        "--no-step-clock",
        dest="step_clock",
        action="store_false",
        help="each answer's next word --token-ms after its last was taken",
    )
    ap.add_argument("--max-tokens", type=int, default=150, help="words per answer")
    ap.add_argument("--seconds", type=float, default=10.0, help="per round, level and arm")
    ap.add_argument("--rounds", type=int, default=3, help="per level, the arms alternating")
    ap.add_argument("--warm-s", type=float, default=3.0, help="turns sent earlier not counted")
    ap.add_argument(
        "--burst-s",
        type=float,
        default=0.0,
        help="every session asks at once, this often (bench.gpu's pattern)",
    )
    ap.add_argument("--probes", type=int, default=4, help="sessions in a process of their own")
    ap.add_argument("--client-procs", type=int, default=1, help="processes for the others")
    ap.add_argument("--compare", action="store_true", help="coalesced and per-token workers")
    ap.add_argument("--no-coalesce", action="store_true", help="only the per-token worker")
    ap.add_argument("--out", type=Path, default=RESULTS / "delta-path.json")
    args = ap.parse_args(argv)
    args.temperature = 0.0
    args.answer_s = (args.ttft_ms + args.max_tokens * args.token_ms) / 1000
    args.tag = "delta"
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    if args.compare:
        arms = list(ARMS)
    else:
        arms = ["per-token" if args.no_coalesce else "coalesced"]
    result: dict[str, Any] = {
        "device": device_name(),
        "settings": {k: v for k, v in vars(args).items() if k != "out"} | {"out": str(args.out)},
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "levels": [],
    }
    workers: dict[str, Worker] = {}
    try:
        for arm in arms:
            port, metrics_port = free_port(), free_port()
            log = args.out.with_name(f"{args.out.stem}-{arm}-worker.log")
            env = worker_env(args, port, metrics_port, ARMS[arm])
            workers[arm] = Worker(env, port, metrics_port, log)
        for arm, worker in workers.items():
            asyncio.run(worker.ready(120))
            print(f"{arm} worker ready ({worker.address})", flush=True)
        for sessions in args.levels:
            runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
            for r in range(args.rounds):
                # Alternating which arm goes first: neither always runs on a warmer box.
                for arm in arms if r % 2 == 0 else arms[::-1]:
                    runs[arm].append(run_round(workers[arm], sessions, args))
                    if workers[arm].proc.poll() is not None:
                        raise RuntimeError(f"stage0 died:\n{workers[arm].tail()}")
            for arm in arms:
                level = summarize(sessions, args, runs[arm]) | {
                    "arm": arm,
                    "by_round": [summarize(sessions, args, [run]) for run in runs[arm]],
                }
                result["levels"].append(level)
                print_level(arm, level)
                for k, one in enumerate(level["by_round"]):
                    print_level(f"round {k}", one)
            write_json(args.out, result)
    finally:
        for worker in workers.values():
            worker.stop()
    write_json(args.out, result)


if __name__ == "__main__":
    main()
