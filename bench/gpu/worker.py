"""A stage0 worker as its own process (`python -m antiphon.stage0.main`, no Redis: it
registers nowhere and is dialled at its address, as the session service's static list
does), configured by the run's settings."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc

from antiphon.common.grpcserver import check_ready
from bench.lib.machine import now
from bench.lib.prometheus import scrape
from bench.lib.results import REPO

# The worker's own services, on its PYTHONPATH (not this process's: nothing here
# imports a stage).
SERVICE_PATHS = [str(REPO / "services" / "common"), str(REPO / "services" / "stage0")]
STAGE0_SERVICE = "antiphon.v1.Stage0Service"


def standalone_env(port: int, metrics_port: int) -> dict[str, str]:
    """A stage0 worker on its own: the services on its path, no profile, no registry."""
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([*paths, *SERVICE_PATHS])
    env.pop("ANTIPHON_PROFILE", None)
    env.update(
        PYTHONUNBUFFERED="1",
        ANTIPHON_LISTEN=f"127.0.0.1:{port}",
        ANTIPHON_ADVERTISE_ADDRESS=f"127.0.0.1:{port}",
        ANTIPHON_METRICS_PORT=str(metrics_port),
        # No registry: the worker is dialled at its address (static list).
        ANTIPHON_REDIS_URL="",
        ANTIPHON_LOG_LEVEL="WARNING",
    )
    return env


def worker_env(
    args: argparse.Namespace, llm_model: str, port: int, metrics_port: int
) -> dict[str, str]:
    """The stage0 settings of the run, as the worker (and --raw-vllm) read them."""
    env = standalone_env(port, metrics_port)
    if args.services is not None:
        # The worker of another checkout (an A/B within one device session).
        other = [str(args.services / "common"), str(args.services / "stage0")]
        env["PYTHONPATH"] = os.pathsep.join([*other, env["PYTHONPATH"]])
    env.update(
        HF_HUB_OFFLINE="1",
        ANTIPHON_BACKEND="cascade",
        ANTIPHON_SHUTDOWN_GRACE_S="3",
        ANTIPHON_MODEL_CACHE=str(args.model_cache),
        ANTIPHON_LLM_MODEL=llm_model,
        ANTIPHON_LLM_DTYPE=args.dtype,
        ANTIPHON_LLM_MAX_NUM_SEQS=str(args.max_num_seqs),
        ANTIPHON_LLM_GPU_MEMORY_UTILIZATION=str(args.gpu_memory_utilization),
        ANTIPHON_LLM_KV_CACHE_GIB=str(args.kv_cache_gib),
        ANTIPHON_LLM_MAX_MODEL_LEN=str(args.max_model_len),
        ANTIPHON_LLM_LOAD_FORMAT="dummy" if args.dummy else "auto",
        ANTIPHON_LLM_THREADS=str(args.llm_threads),
        ANTIPHON_ASR_THREADS=str(args.asr_threads),
        ANTIPHON_ASR_WORKERS=str(args.asr_workers),
        ANTIPHON_VAD_THREADS=str(args.vad_threads),
        # Every session of the largest level binds at once.
        ANTIPHON_CAPACITY=str((max(args.levels) + 1) * args.front_ends),
        ANTIPHON_LLM_FRONT_ENDS=str(args.front_ends),
    )
    if args.dummy:
        # Random weights: a sampled n-gram may repeat by chance; the loop stop
        # would then cut answers short of --max-tokens.
        env["ANTIPHON_LLM_LOOP_NGRAM"] = "0"
    if args.max_num_batched_tokens is not None:
        env["ANTIPHON_LLM_MAX_NUM_BATCHED_TOKENS"] = str(args.max_num_batched_tokens)
    env["ANTIPHON_LLM_STREAM_INTERVAL"] = str(args.stream_interval)
    if args.enforce_eager is not None:
        env["ANTIPHON_LLM_ENFORCE_EAGER"] = str(args.enforce_eager).lower()
    return env


# The worker's entry point, first letting any process of its user trace it: under
# Yama's ptrace_scope 1 (and no CAP_SYS_PTRACE, as in a container) py-spy, a
# sibling and not its parent, may not attach otherwise. PR_SET_PTRACER_ANY.
TRACEABLE_MAIN = (
    "import ctypes, runpy; ctypes.CDLL(None).prctl(0x59616D61, ctypes.c_ulong(-1), 0, 0, 0);"
    " runpy.run_module('antiphon.stage0.main', run_name='__main__', alter_sys=True)"
)


class Worker:
    """`python -m antiphon.stage0.main` in its own process group, logging to a file:
    `front_ends` workers at port + i (metrics at metrics_port + i) on one engine core."""

    def __init__(
        self,
        env: dict[str, str],
        port: int,
        metrics_port: int,
        log: Path,
        traceable: bool = False,
        front_ends: int = 1,
    ) -> None:
        self.addresses = [f"127.0.0.1:{port + k}" for k in range(front_ends)]
        self.metrics_ports = [metrics_port + k for k in range(front_ends)]
        # The first front end's (the only one's, for most callers).
        self.address = self.addresses[0]
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = log.open("wb")
        entry = ["-c", TRACEABLE_MAIN] if traceable else ["-m", "antiphon.stage0.main"]
        self.proc = subprocess.Popen(
            [sys.executable, *entry],
            env=env,
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    async def ready(self, timeout_s: float) -> float:
        """Seconds until every front end is ready."""
        t0 = now()
        channels = [grpc.aio.insecure_channel(a) for a in self.addresses]
        try:
            while now() - t0 < timeout_s:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"stage0 exited ({self.proc.returncode}):\n{self.tail()}")
                ready = [await check_ready(ch, STAGE0_SERVICE, timeout_s=2.0) for ch in channels]
                if all(ready):
                    return now() - t0
                await asyncio.sleep(1.0)
        finally:
            for ch in channels:
                await ch.close()
        raise RuntimeError(f"stage0 not ready within {timeout_s:.0f}s:\n{self.tail()}")

    def tail(self, lines: int = 60) -> str:
        self._log.flush()
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def scrape(self) -> dict[str, float]:
        """The worker's Prometheus samples, summed over its front ends."""
        return scrape(self.metrics_ports)

    def stop(self) -> None:
        if self.proc.poll() is None:
            # Its own group: the worker and the vLLM engine core it started.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()
