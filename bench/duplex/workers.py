"""The workers of a run, each its own process (a stage0 `moshi` and a stage1 `mimi`
worker, or both `nemotron`, or both `minicpmo`: the thinker and its voice, the voice
left out with `--no-voice`), configured by one profile file (no Redis: each is dialled
at its address)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from antiphon.common.grpcserver import check_ready
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from bench.lib.machine import now
from bench.lib.prometheus import scrape
from bench.lib.results import REPO

# The workers' own services, on their PYTHONPATH.
SERVICES = [REPO / "services" / s for s in ("common", "stage0", "stage1")]
STAGE0 = ("antiphon.stage0.main", "antiphon.v1.Stage0Service")
STAGE1 = ("antiphon.stage1.main", "antiphon.v1.Stage1Service")
OUTPUT_RATE = 24000


@dataclass(frozen=True)
class Model:
    """An architecture the bench serves: its workers' backends, its reference loop."""

    stage0: str
    # None: no stage1 backend serves it yet (its frames are where a session ends).
    stage1: str | None
    # None: no reference loop to hold the worker against.
    reference: str | None
    checkpoint: str
    # What `--check` imports: the backends' engines and the model code.
    modules: tuple[str, ...]
    # Whether it takes the Moshi architecture's own settings: the KV cache's
    # format (duplex_kv_cache), front ends (duplex_front_ends), and a window
    # for its reference loop (NeMo's keeps the whole call).
    moshi_settings: bool
    # A model that decides once a unit of this many ms (bench/duplex/units.py
    # measures it) rather than once a frame; 0: frames.
    unit_ms: int = 0


MODELS = {
    "moshi": Model(
        "moshi",
        "mimi",
        "bench.duplex.moshi_loop",
        "random:7b",
        (
            "moshi.models",
            "antiphon.stage0.backends.moshi.engines",
            "antiphon.stage1.backends.mimi.lockstep",
        ),
        moshi_settings=True,
    ),
    "nemotron": Model(
        "nemotron",
        "nemotron",
        "bench.duplex.nemotron_loop",
        "random:9b",
        (
            "nemo.collections.speechlm2",
            "antiphon.stage0.backends.nemotron.engines",
            "antiphon.stage1.backends.nemotron.lockstep",
        ),
        moshi_settings=False,
    ),
    "minicpmo": Model(
        "minicpmo",
        "minicpmo",
        None,
        "random:4.5",
        (
            "vllm.v1.engine.async_llm",
            "vllm.model_executor.models.minicpmo",
            "antiphon.stage0.backends.minicpmo.engines",
            "antiphon.stage1.backends.minicpmo.talker",
            "antiphon.stage1.backends.minicpmo.token2wav",
        ),
        moshi_settings=False,
        unit_ms=1000,
    ),
}


def stage1_backend(args: argparse.Namespace) -> str | None:
    """The run's stage1 backend: the model's, None under `--no-voice` (minicpmo's
    thinker alone, as its first results were made)."""
    return MODELS[args.model].stage1 if getattr(args, "voice", True) else None


def worker_profile(args: argparse.Namespace, ports: dict[str, int]) -> dict[str, Any]:
    """The profile the workers read (ANTIPHON_PROFILE): a section each, no registry
    (stage0's alone under `--no-voice`)."""
    levels = [*args.levels, *getattr(args, "frames_at", [])]
    capacity = max([*levels, getattr(args, "prime_sessions", 1)])
    model = MODELS[args.model]
    stage0 = {
        "backend": model.stage0,
        "listen": f"127.0.0.1:{ports['stage0']}",
        "metrics_port": ports["stage0_metrics"],
        "duplex_checkpoint": args.checkpoint,
        "duplex_device": args.device,
        "duplex_dtype": args.dtype,
        "duplex_threads": args.threads,
        "capacity": capacity,
    }
    if model.moshi_settings:
        stage0 |= {"duplex_kv_cache": args.kv_cache, "duplex_front_ends": args.front_ends}
    if args.context:
        stage0["duplex_context"] = args.context
    if args.torch_compile:
        stage0["duplex_compile"] = True
    if getattr(args, "stage0_gpu_memory", None) is not None:
        # vLLM's share of the card (the thinker's), leaving the voice its room.
        stage0["llm_gpu_memory_utilization"] = args.stage0_gpu_memory
    stage0 |= dict(kv.split("=", 1) for kv in args.stage0_set)
    common = {"log_level": args.log_level, "redis_url": "", "shutdown_grace_s": 3}
    backend = stage1_backend(args)
    if backend is None:
        return {"common": common, "stage0": stage0}
    stage1 = {
        "backend": backend,
        "listen": f"127.0.0.1:{ports['stage1']}",
        "metrics_port": ports["stage1_metrics"],
        "duplex_checkpoint": args.checkpoint,
        "duplex_device": args.device,
        "duplex_threads": args.threads,
        "capacity": capacity,
    }
    if model.unit_ms:
        # MiniCPM-o's voice: every speaking session's unit in one batch at the largest level.
        stage1["duplex_batch"] = max(levels)
    else:
        stage1 |= {"output_rate": OUTPUT_RATE, "duplex_front_ends": args.stage1_front_ends}
    if args.torch_compile:
        stage1["duplex_compile"] = True
    stage1 |= dict(kv.split("=", 1) for kv in args.stage1_set)
    return {"common": common, "stage0": stage0, "stage1": stage1}


def unknown_settings(profile: dict[str, Any]) -> dict[str, list[str]]:
    """Profile keys the workers' settings classes do not declare (ignored silently there)."""
    from antiphon.stage0.settings import Stage0Settings
    from antiphon.stage1.settings import Stage1Settings

    out = {}
    for section, cls in (("stage0", Stage0Settings), ("stage1", Stage1Settings)):
        if section not in profile:
            continue
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
        return scrape([self.metrics_port])

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
