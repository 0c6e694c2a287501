"""How late the event loop runs while the VAD hears N live sessions.

    python -m bench.vad_loop [--sessions 128] [--seconds 10] [--aligned] [--out FILE]

A stage0 worker runs every session's stream, vLLM's front end and the VAD's
batching on one asyncio loop. Here N sessions each push a 200 ms chunk of
speech every 200 ms (their starts spread over one chunk, as live callers'
are; `--aligned`: all at the same instant, as bench.gpu's sessions
speak) into one `VadBatcher`, while a timer due every 10 ms records how late
it ran: the wait that every other request on that loop (a Generate, a
token to send) would have had. The script measures whichever VadBatcher
the tree it runs from has, so running it from two checkouts compares them.

Measured on the 2-core dev box (Silero on one thread), see docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from antiphon.stage0.assets import locate_vad
from antiphon.stage0.vad import SileroVad, VadBatcher, VadEvent

# First: it puts the services on the path.
from bench.lib.questions import load_recorded
from bench.lib.stats import pct

CHUNK_S = 0.2
CHUNK_BYTES = int(16000 * CHUNK_S) * 2
TICK_S = 0.01


async def run(sessions: int, seconds: float, aligned: bool) -> dict[str, object]:
    speech = b"".join(load_recorded())
    vad = SileroVad(locate_vad(), threads=1)
    sizes: list[int] = []
    batcher = VadBatcher(vad, observe_batch=sizes.append)
    events = 0

    def heard(got: list[VadEvent]) -> None:
        nonlocal events
        events += len(got)

    async def caller(n: int, start: float) -> None:
        stream = vad.stream()
        offset = (n * 7919 * CHUNK_BYTES) % len(speech)
        k = 0
        while (due := start + k * CHUNK_S) < start + seconds:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            at = (offset + k * CHUNK_BYTES) % (len(speech) - CHUNK_BYTES)
            stream.push(speech[at : at + CHUNK_BYTES])
            batcher.submit(stream, heard)
            k += 1

    lags: list[float] = []

    async def timer(until: float) -> None:
        while time.perf_counter() < until:
            due = time.perf_counter() + TICK_S
            await asyncio.sleep(TICK_S)
            lags.append((time.perf_counter() - due) * 1000)

    t0 = time.perf_counter() + 0.5
    cpu0 = time.process_time()
    await asyncio.gather(
        timer(t0 + seconds),
        *(caller(n, t0 + (0 if aligned else CHUNK_S * n / sessions)) for n in range(sessions)),
    )
    cpu = time.process_time() - cpu0
    return {
        "sessions": sessions,
        "seconds": seconds,
        "aligned": aligned,
        "loop_lag_ms": {
            "p50": pct(lags, 50),
            "p95": pct(lags, 95),
            "p99": pct(lags, 99),
            "max": round(max(lags), 2),
            "mean": round(statistics.fmean(lags), 2),
        },
        "vad_calls": len(sizes),
        "vad_batch_mean": round(statistics.fmean(sizes), 1) if sizes else 0,
        "vad_events": events,
        "cpu_s": round(cpu, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.vad_loop", description=__doc__)
    ap.add_argument("--sessions", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--aligned", action="store_true", help="every session speaks in step")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result = asyncio.run(run(args.sessions, args.seconds, args.aligned))
    print(json.dumps(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
