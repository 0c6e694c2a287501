"""Model-native duplex capacity: N sessions through a stage0 `moshi` and a stage1 `mimi` worker.

    python -m bench.duplex --checkpoint random:7b --device cuda --context 1500 \\
        --levels 1,16,32,64,96,128 --window-s 10 --budget-s 450 --out $OUT/duplex-h200.json
    python -m bench.duplex --checkpoint random:tiny --device cpu --levels 1,2 --window-s 3
    python -m bench.duplex --table bench/results/duplex-h200.json

First the reference loop alone (bench/duplex_reference.py: moshi's own Mimi
encode + LMGen.step + Mimi decode of B rows in lockstep, same shape, context
and dtype), then both workers as real gRPC processes (`python -m
antiphon.stage0.main` / `antiphon.stage1.main`, configured by a profile file
written beside --out, no Redis: each is dialled at its address), capacity
the largest level. Per level, N sessions act as the session service does:
a Stage0Service.Bind stream (Stage0Open in the native lane, then 80 ms of
PCM16 at the worker's input rate every 80 ms on the wall clock, paced
against deadlines, from bench/gpu_speech.npz resampled) and a
Stage1Service.Bind stream (Stage1Open at 24 kHz) to which every ModelFrame
received is forwarded as a DecodeFrame of one response, so every frame
comes back as audio. The sessions run in client processes of their own.

After --warmup-s, over --window-s: the worker's frame step p50/p99 (its
histogram's delta over the window, interpolated within buckets), late and
silence frames and dropped input (its counters), stage1's decode step, the
gap between consecutive audio chunks each session received (p50/p99 over all
sessions; 80 ms is real time), GPU memory (nvidia-smi) and CPU of the
workers; `real_time`: worker p99 < 80 ms, no late frame, gap p99 < 120 ms,
every session streaming. Levels run in increasing order and the JSON is
written after each, so a run stopped at its limit keeps what it measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from antiphon.common.grpcserver import CHANNEL_OPTIONS, check_ready
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from bench.gpu import MemoryPeaks, device_name, free_port, gpu_query, pct, version, write_json
from bench.procstats import ProcSampler

REPO = Path(__file__).resolve().parents[1]
SERVICES = [REPO / "services" / s for s in ("common", "stage0", "stage1")]
SPEECH = REPO / "bench" / "gpu_speech.npz"
STAGE0 = ("antiphon.stage0.main", "antiphon.v1.Stage0Service")
STAGE1 = ("antiphon.stage1.main", "antiphon.v1.Stage1Service")
FRAME_S = 0.080
OUTPUT_RATE = 24000
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
# Streams of one HTTP/2 connection (each session has two).
STREAMS_PER_CHANNEL = 64


def now() -> float:
    # CLOCK_MONOTONIC: one clock for every process of the machine.
    return time.monotonic()


# ------------------------------------------------------------------ workers
def worker_profile(args: argparse.Namespace, ports: dict[str, int]) -> dict[str, Any]:
    """The profile both workers read (ANTIPHON_PROFILE): a section each, no registry."""
    capacity = max(args.levels)
    stage0 = {
        "backend": "moshi",
        "listen": f"127.0.0.1:{ports['stage0']}",
        "metrics_port": ports["stage0_metrics"],
        "duplex_checkpoint": args.checkpoint,
        "duplex_device": args.device,
        "duplex_dtype": args.dtype,
        "duplex_threads": args.threads,
        "capacity": capacity,
    }
    if args.context:
        stage0["duplex_context"] = args.context
    stage1 = {
        "backend": "mimi",
        "listen": f"127.0.0.1:{ports['stage1']}",
        "metrics_port": ports["stage1_metrics"],
        "duplex_checkpoint": args.checkpoint,
        "duplex_device": args.device,
        "duplex_threads": args.threads,
        "output_rate": OUTPUT_RATE,
        "capacity": capacity,
    }
    if args.torch_compile:
        stage0["duplex_compile"] = stage1["duplex_compile"] = True
    stage0 |= dict(kv.split("=", 1) for kv in args.stage0_set)
    stage1 |= dict(kv.split("=", 1) for kv in args.stage1_set)
    common = {"log_level": args.log_level, "redis_url": "", "shutdown_grace_s": 3}
    return {"common": common, "stage0": stage0, "stage1": stage1}


def unknown_settings(profile: dict[str, Any]) -> dict[str, list[str]]:
    """Profile keys the workers' settings classes do not declare (ignored silently there)."""
    from antiphon.stage0.settings import Stage0Settings
    from antiphon.stage1.settings import Stage1Settings

    out = {}
    for section, cls in (("stage0", Stage0Settings), ("stage1", Stage1Settings)):
        fields = set(cls.model_fields)
        keys = {**profile["common"], **profile[section]}
        if missing := sorted(k for k in keys if k not in fields):
            out[section] = missing
    return out


def worker_env(args: argparse.Namespace, profile_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTIPHON_")}
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([*paths, *map(str, SERVICES)])
    env |= {"ANTIPHON_PROFILE": str(profile_path), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    # moshi torch.compiles a few functions unless told not to; the workers do not
    # (duplex_compile), nor, by this, the reference loop (`--torch-compile`: both do).
    env["NO_TORCH_COMPILE"] = "" if args.torch_compile else "1"
    return env


class WorkerProcess:
    """One stage worker in its own process group, logging to a file."""

    def __init__(self, module: str, service: str, address: str, metrics_port: int) -> None:
        self.module, self.service, self.address = module, service, address
        self.metrics_port = metrics_port
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None

    def start(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module],
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    async def wait_ready(self, timeout_s: float) -> float:
        assert self.proc is not None
        t0 = now()
        async with grpc.aio.insecure_channel(self.address) as channel:
            while now() - t0 < timeout_s:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.module} exited ({self.proc.returncode}):\n{self.tail()}"
                    )
                if await check_ready(channel, self.service, timeout_s=2.0):
                    return now() - t0
                await asyncio.sleep(0.5)
        raise RuntimeError(f"{self.module} not ready in {timeout_s:.0f}s:\n{self.tail()}")

    async def describe(self) -> pb.StageInfo:
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub: Any = (
                stage_pb2_grpc.Stage0ServiceStub(channel)
                if "Stage0" in self.service
                else stage_pb2_grpc.Stage1ServiceStub(channel)
            )
            info: pb.StageInfo = await stub.Describe(pb.DescribeRequest(), timeout=10)
            return info

    def scrape(self) -> dict[str, float]:
        """Prometheus samples, `name{labels}` -> value (empty when unreachable)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[name] = float(value)
        return out

    def tail(self, lines: int = 40) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


async def wait_idle(workers: Sequence[WorkerProcess], timeout_s: float = 30.0) -> None:
    """Until neither worker holds a session (the last level's slots are free again)."""
    t0 = now()
    while now() - t0 < timeout_s:
        infos = await asyncio.gather(*(w.describe() for w in workers))
        if all(i.active_sessions == 0 for i in infos):
            return
        await asyncio.sleep(0.25)


def gpu_memory_by_pid() -> dict[int, float]:
    """MiB of GPU memory each compute process holds (nvidia-smi; {} without one)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    used = {}
    for line in out.splitlines():
        with contextlib.suppress(ValueError):
            pid, mib = (x.strip() for x in line.split(","))
            used[int(pid)] = float(mib)
    return used


# ------------------------------------------------------------------ metrics
def metric_sum(samples: dict[str, float], name: str) -> float:
    """A counter summed over its label sets."""
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


def histogram_buckets(samples: dict[str, float], name: str) -> dict[float, float]:
    """Cumulative bucket counts by upper bound, summed over the other labels."""
    out: dict[float, float] = {}
    for key, value in samples.items():
        if key.startswith(name + "_bucket{") and (m := re.search(r'le="([^"]+)"', key)):
            le = float(m.group(1).replace("+Inf", "inf"))
            out[le] = out.get(le, 0.0) + value
    return out


def histogram_quantile(buckets: dict[float, float], q: float) -> float | None:
    """Prometheus's histogram_quantile: linear within the bucket that holds it; the
    largest finite bound when it falls in +Inf."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower
            inside = count - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = le, count
    return lower


def step_window(before: dict[str, float], after: dict[str, float], name: str) -> dict[str, Any]:
    """A seconds histogram over the window, in ms: count, mean, p50, p99."""
    b0, b1 = histogram_buckets(before, name), histogram_buckets(after, name)
    delta = {le: b1[le] - b0.get(le, 0.0) for le in b1}
    count = metric_sum(after, name + "_count") - metric_sum(before, name + "_count")
    total = metric_sum(after, name + "_sum") - metric_sum(before, name + "_sum")
    out: dict[str, Any] = {"count": int(count), "mean": None, "p50": None, "p99": None}
    if count:
        out["mean"] = round(total / count * 1000, 2)
    for q in (50, 99):
        v = histogram_quantile(delta, q / 100)
        out[f"p{q}"] = round(v * 1000, 2) if v is not None else None
    return out


# ------------------------------------------------------------------ clients
@dataclass
class Schedule:
    """Monotonic times shared by every client process: audio starts at `start`;
    the window is [start + warmup, end)."""

    start: float
    window_start: float
    end: float


@dataclass
class SessionRecord:
    index: int
    opened_s: float | None = None
    audio_times: list[float] = field(default_factory=list)
    frame_times: list[float] = field(default_factory=list)
    late_flagged: int = 0
    # How late the pacer sent each frame past its deadline, ms (window only).
    send_lag_ms: list[float] = field(default_factory=list)
    error: str = ""


def speech_loop(rate: int) -> np.ndarray:
    """The four spoken questions with a second of silence after each, at `rate`
    (linear interpolation from 16 kHz), as one loop each session starts into."""
    with np.load(SPEECH) as data:
        parts = [data[f"q{i}"].astype(np.float32) for i in range(4)]
    pcm = np.concatenate([np.concatenate((p, np.zeros(16000, np.float32))) for p in parts])
    t = np.arange(int(len(pcm) * rate / 16000)) * 16000 / rate
    return np.interp(t, np.arange(len(pcm)), pcm).astype("<i2")


class Stream:
    """A request queue feeding one Bind call."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    async def requests(self) -> AsyncIterator[Any]:
        while (req := await self.queue.get()) is not None:
            yield req


async def run_session(
    stubs: tuple[Any, Any],
    rec: SessionRecord,
    sched: Schedule,
    pcm: np.ndarray,
    rate: int,
    phase: float,
) -> None:
    """One session: paced audio to stage0, its frames to stage1, audio back."""
    up, down = Stream(), Stream()
    call0 = stubs[0].Bind(up.requests())
    call1 = stubs[1].Bind(down.requests())
    sid = f"bench-{rec.index}"
    up.queue.put_nowait(
        pb.Stage0Request(open=pb.Stage0Open(session_id=sid, lane=pb.LANE_NATIVE, skip_vad=True))
    )
    down.queue.put_nowait(
        pb.Stage1Request(open=pb.Stage1Open(session_id=sid, sample_rate_hz=OUTPUT_RATE))
    )
    t_open = now()
    await asyncio.gather(call0.initial_metadata(), call1.initial_metadata())
    rec.opened_s = round(now() - t_open, 3)

    async def send_audio() -> None:
        samples = int(FRAME_S * rate)
        offset = (rec.index * 7919 * samples) % len(pcm)
        # A microphone records nothing before its session opens: no burst to catch up.
        k = max(0, math.ceil((now() - sched.start - phase) / FRAME_S))
        while True:
            deadline = sched.start + phase + k * FRAME_S
            if deadline >= sched.end:
                return
            await asyncio.sleep(max(0.0, deadline - now()))
            if deadline >= sched.window_start:
                rec.send_lag_ms.append((now() - deadline) * 1000)
            at = (offset + k * samples) % (len(pcm) - samples)
            chunk = pcm[at : at + samples].tobytes()
            up.queue.put_nowait(pb.Stage0Request(audio=pb.Stage0Audio(epoch=0, pcm16=chunk)))
            k += 1

    async def forward_frames() -> None:
        async for ev in call0:
            if ev.WhichOneof("kind") == "frame":
                f = ev.frame
                t = now()
                rec.frame_times.append(t)
                if f.late and t >= sched.window_start:
                    rec.late_flagged += 1
                decode = pb.DecodeFrame(
                    epoch=f.epoch,
                    response_id=f"resp-{sid}",
                    codes=f.codes,
                    text=f.text,
                    index=f.index,
                )
                down.queue.put_nowait(pb.Stage1Request(frame=decode))
            elif ev.WhichOneof("kind") == "error":
                rec.error = f"stage0 {ev.error.code}: {ev.error.message}"[:200]

    async def read_audio() -> None:
        async for ev in call1:
            if ev.WhichOneof("kind") == "audio":
                rec.audio_times.append(now())
            elif ev.WhichOneof("kind") == "error":
                rec.error = f"stage1 {ev.error.code}: {ev.error.message}"[:200]

    readers = [asyncio.create_task(forward_frames()), asyncio.create_task(read_audio())]
    try:
        await send_audio()
        await asyncio.sleep(max(0.0, sched.end - now()))
    finally:
        up.queue.put_nowait(None)
        down.queue.put_nowait(None)
        for call in (call0, call1):
            call.cancel()
        for task in readers:
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await task


async def drive(
    addresses: tuple[str, str], indexes: list[int], sessions: int, sched: Schedule, rate: int
) -> list[dict[str, Any]]:
    """This process's sessions, each at its own phase of the 80 ms period."""
    pcm = speech_loop(rate)
    options = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
    per = max(1, math.ceil(len(indexes) / STREAMS_PER_CHANNEL))
    channels = [
        [grpc.aio.insecure_channel(a, options=options) for _ in range(per)] for a in addresses
    ]
    records = [SessionRecord(i) for i in indexes]

    async def one(k: int, rec: SessionRecord) -> None:
        stubs = (
            stage_pb2_grpc.Stage0ServiceStub(channels[0][k % per]),
            stage_pb2_grpc.Stage1ServiceStub(channels[1][k % per]),
        )
        try:
            await run_session(stubs, rec, sched, pcm, rate, FRAME_S * rec.index / sessions)
        except Exception as exc:
            rec.error = rec.error or f"{type(exc).__name__}: {exc}"[:200]

    try:
        await asyncio.gather(*(one(k, r) for k, r in enumerate(records)))
    finally:
        for own in channels:
            for ch in own:
                await ch.close()
    return [asdict(r) for r in records]


def _client_main(
    addresses: tuple[str, str],
    indexes: list[int],
    sessions: int,
    sched: Schedule,
    rate: int,
    results: Any,
) -> None:
    try:
        results.put(asyncio.run(drive(addresses, indexes, sessions, sched, rate)))
    except BaseException as exc:
        results.put([asdict(SessionRecord(i, error=repr(exc)[:200])) for i in indexes])
        raise


def run_clients(
    args: argparse.Namespace, addresses: tuple[str, str], sessions: int, sched: Schedule, rate: int
) -> list[dict[str, Any]]:
    """N sessions over up to --client-procs processes (one level of 1: this process)."""
    procs = max(1, min(args.client_procs, math.ceil(sessions / args.sessions_per_proc)))
    shares = [list(range(k, sessions, procs)) for k in range(procs)]
    if procs == 1:
        return asyncio.run(drive(addresses, shares[0], sessions, sched, rate))
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    workers = [
        ctx.Process(target=_client_main, args=(addresses, s, sessions, sched, rate, results))
        for s in shares
    ]
    for w in workers:
        w.start()
    out: list[dict[str, Any]] = []
    for _ in workers:
        out.extend(results.get(timeout=sched.end - now() + 120))
    for w in workers:
        w.join(30)
    return out


# ------------------------------------------------------------------ levels
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
        records = run_clients(args, (stage0.address, stage1.address), sessions, sched, rate)
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
    ports = {k: free_port() for k in ("stage0", "stage1", "stage0_metrics", "stage1_metrics")}
    profile = worker_profile(args, ports)
    result["worker_profile"] = profile
    result["settings_unknown_to_workers"] = unknown_settings(profile)
    profile_path = args.out.with_name(args.out.stem + "-profile.json")
    profile_path.write_text(json.dumps(profile, indent=2) + "\n")  # YAML reads JSON
    env = worker_env(args, profile_path)
    workers = [
        WorkerProcess(*STAGE0, f"127.0.0.1:{ports['stage0']}", ports["stage0_metrics"]),
        WorkerProcess(*STAGE1, f"127.0.0.1:{ports['stage1']}", ports["stage1_metrics"]),
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


# ------------------------------------------------------------------ reference
def run_reference(args: argparse.Namespace, result: dict[str, Any], deadline: float) -> None:
    """bench/duplex_reference.py in a process of its own (its GPU memory is freed
    before the workers start); its JSON lines as it prints them."""
    steps = args.reference_steps or (100 if args.device.startswith("cuda") else 8)
    cmd = [
        sys.executable,
        "-m",
        "bench.duplex_reference",
        f"--checkpoint={args.checkpoint}",
        f"--device={args.device}",
        f"--dtype={args.dtype}",
        f"--batches={','.join(map(str, args.levels))}",
        f"--steps={steps}",
        f"--warmup={10 if args.device.startswith('cuda') else 2}",
        f"--threads={args.threads}",
    ]
    if args.context:
        cmd.append(f"--context={args.context}")
    timeout = args.reference_timeout_s
    if args.budget_s:
        timeout = min(timeout, max(10.0, (deadline - now()) * args.reference_share))
        cmd.append(f"--deadline-s={timeout - 5:.0f}")
    ref: dict[str, Any] = {"levels": [], "steps": steps}
    result["reference"] = ref
    log = args.out.with_name(args.out.stem + "-reference.log")
    env = worker_env(args, Path("-")) | {"ANTIPHON_PROFILE": ""}
    with log.open("w") as out:
        try:
            done = subprocess.run(
                cmd,
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=out,
                text=True,
                timeout=timeout,
            )
            text = done.stdout
            if done.returncode:
                ref["error"] = f"exited {done.returncode} (see {log.name})"
        except subprocess.TimeoutExpired as exc:
            text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            ref["error"] = f"stopped at {timeout:.0f}s"
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        with contextlib.suppress(json.JSONDecodeError):
            row = json.loads(line)
            if "built_s" in row:
                ref |= row
            elif "error" in row or "skipped" in row:
                ref.setdefault("not_measured", []).append(row)
            else:
                ref["levels"].append(row)
    print(f"reference: {len(ref['levels'])} batch sizes ({log.name})", flush=True)


def ratios(
    levels: list[dict[str, Any]], reference: list[dict[str, Any]], capacity: int
) -> list[dict[str, Any]]:
    """Worker step p99 over the reference's: its whole frame at the same N (the
    issue's ratio), its encode + LM only (what the worker's step times; stage1
    decodes), and its whole frame at the capacity (the worker steps every row,
    bound or not)."""
    by_n = {r["sessions"]: r for r in reference}
    full = by_n.get(capacity)

    def ratio(a: float, b: float | None) -> float | None:
        return round(a / b, 2) if b else None

    out = []
    for lv in levels:
        ref, p99 = by_n.get(lv["sessions"]), lv["worker_step_ms"]["p99"]
        if not p99 or not (ref or full):
            continue
        out.append(
            {
                "sessions": lv["sessions"],
                "worker_p99_over_reference_p99": ratio(p99, (ref or {}).get("all_p99_ms")),
                "over_reference_enc_lm_p99": ratio(p99, (ref or {}).get("enc_lm_p99_ms")),
                "over_reference_at_capacity_p99": ratio(p99, (full or {}).get("all_p99_ms")),
            }
        )
    return out


def finish(result: dict[str, Any], out: Path) -> None:
    reference = result.get("reference", {}).get("levels", [])
    result["ratio"] = ratios(result["levels"], reference, result["settings"]["capacity"])
    real = [lv["sessions"] for lv in result["levels"] if lv["real_time"]]
    result["max_real_time_sessions"] = max(real) if real else None
    write_json(out, result)


# ------------------------------------------------------------------ table
def table(data: dict[str, Any]) -> str:
    ref = {r["sessions"]: r for r in data.get("reference", {}).get("levels", [])}
    ratio = {r["sessions"]: r["worker_p99_over_reference_p99"] for r in data.get("ratio", [])}
    context = data["context"] or data.get("reference", {}).get("context_frames", "default")
    lines = [
        f"{data['device']}; {data['checkpoint']}, context {context} frames,"
        f" {data['dtype']}; window {data['settings']['window_s']} s.",
        "",
        "| sessions | step p50 / p99 ms | late | silence | audio gap p50 / p99 ms"
        " | GPU MiB | real time | reference p50 / p99 ms | p99 ratio |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | :---: | ---: | ---: |",
    ]
    for lv in data["levels"]:
        s, g, r = lv["worker_step_ms"], lv["audio_gap_ms"], ref.get(lv["sessions"], {})
        mem = lv["gpu_memory_mib"]
        used = sum(m for m in (mem["stage0"], mem["stage1"]) if m) or mem["device_peak"]
        lines.append(
            f"| {lv['sessions']} | {_n(s['p50'])} / {_n(s['p99'])} | {lv['late_frames']:.0f}"
            f" | {lv['silence_frames']:.0f} | {_n(g['p50'])} / {_n(g['p99'])} | {_n(used, 0)}"
            f" | {'yes' if lv['real_time'] else 'no'}"
            f" | {_n(r.get('all_p50_ms'))} / {_n(r.get('all_p99_ms'))}"
            f" | {_n(ratio.get(lv['sessions']), 2)} |"
        )
    for n in data.get("skipped_levels", []):
        lines.append(f"| {n} | skipped (budget) | | | | | | | |")
    return "\n".join(lines)


def _n(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# ------------------------------------------------------------------ main
def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    ap.add_argument("--checkpoint", default="random:7b", help="duplex_checkpoint of both workers")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--context", type=int, default=None, help="attention window in frames")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (workers, reference)")
    ap.add_argument("--levels", type=ints, default=[1, 16, 32, 64, 96, 128])
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--window-s", type=float, default=10.0)
    ap.add_argument("--budget-s", type=float, default=0.0, help="skip what would end after it")
    ap.add_argument("--client-procs", type=int, default=8)
    ap.add_argument("--sessions-per-proc", type=int, default=16)
    ap.add_argument("--startup-timeout", type=float, default=420.0)
    ap.add_argument("--reference-steps", type=int, default=0, help="default: 100 cuda, 8 cpu")
    ap.add_argument("--reference-timeout-s", type=float, default=240.0)
    ap.add_argument(
        "--reference-share", type=float, default=0.3, help="of the budget, the reference's"
    )
    ap.add_argument("--no-reference", dest="reference", action="store_false")
    ap.add_argument("--torch-compile", action="store_true", help="let moshi torch.compile")
    ap.add_argument("--stage0-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--stage1-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument(
        "--out", type=Path, help="default: bench/results/duplex-h200.json (cuda), duplex-cpu.json"
    )
    ap.add_argument("--check", action="store_true", help="imports and settings only")
    ap.add_argument("--table", type=Path, help="print a results file as a markdown table")
    args = ap.parse_args(argv)
    args.levels = sorted(set(args.levels))
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    if args.out is None:
        name = "duplex-h200.json" if args.device.startswith("cuda") else "duplex-cpu.json"
        args.out = REPO / "bench" / "results" / name
    args.out = args.out.resolve()
    return args


def check(args: argparse.Namespace) -> dict[str, Any]:
    """What the run needs: the workers' imports, moshi, and the settings they declare."""
    report: dict[str, Any] = {"device": device_name(), "python": sys.version.split()[0]}
    backends = ("antiphon.stage0.duplex_engines", "antiphon.stage1.mimi_lockstep")
    for module in ("moshi.models", STAGE0[0], STAGE1[0], *backends):
        try:
            __import__(module)
            report[module] = "ok"
        except Exception as exc:
            report[module] = f"{type(exc).__name__}: {exc}"
    with contextlib.suppress(ImportError):
        import torch

        report["cuda_devices"] = torch.cuda.device_count()
    report["unknown_settings"] = unknown_settings(
        worker_profile(
            args, dict.fromkeys(("stage0", "stage1", "stage0_metrics", "stage1_metrics"), 0)
        )
    )
    report["versions"] = {d: version(d) for d in ("torch", "moshi", "grpcio", "protobuf")}
    return report


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    if args.check:
        print(json.dumps(check(args), indent=2))
        return
    started = now()
    deadline = started + args.budget_s if args.budget_s else math.inf
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "device": device_name(),
        "date": time.strftime("%Y-%m-%d"),
        "checkpoint": args.checkpoint,
        "context": args.context,
        "dtype": args.dtype,
        "torch_device": args.device,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "table", "check")}
        | {"capacity": max(args.levels), "frame_ms": FRAME_S * 1000},
        "versions": {d: version(d) for d in ("torch", "moshi", "grpcio", "numpy")},
        "real_time_definition": f"worker step p99 < {STEP_P99_MS:.0f} ms (its histogram over"
        f" the window), no late frame, audio gap p99 < {GAP_P99_MS:.0f} ms (client side, every"
        " session), every session streaming and no error",
        "gpu_memory": "workers: nvidia-smi's used MiB per worker process at the window's end"
        " (null where its pids are not the container's) and the device's peak during the level;"
        " reference: torch's max_memory_allocated",
        "levels": [],
        "skipped_levels": [],
    }
    if args.reference:
        run_reference(args, result, deadline)
        finish(result, args.out)
    try:
        run_worker_levels(args, result, deadline)
    finally:
        result["wall_s"] = round(now() - started, 1)
        finish(result, args.out)
    print(table(result))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
