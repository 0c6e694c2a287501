"""The stack a load or soak run serves from: deploy/local/stack.py's processes with the
limits raised, and a sampler of each service's CPU and memory."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.lib.procstats import ProcSampler
from bench.lib.prometheus import bucket_quantile, histogram_delta, scrape
from deploy.local.stack import DEFAULT_PROFILE, LocalStack, Ports


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


def worker_env(ports: Ports, front_ends: int, voices: int) -> dict[str, str]:
    """stage0's and stage1's worker processes, and where the session finds each.

    The counts are set here, not left to the profile: a profile's own count
    that differed from the bench's left the session addresses with no worker
    behind them (on 2026-12-05 "eight front ends" ran the GPU profile's four)."""
    env = {"ANTIPHON_LLM_FRONT_ENDS": str(front_ends), "ANTIPHON_WORKER_PROCESSES": str(voices)}
    for stage, first, count in (
        ("STAGE0", ports.stage0, front_ends),
        ("STAGE1", ports.stage1, voices),
    ):
        if count > 1:
            addresses = [f"127.0.0.1:{first + k}" for k in range(count)]
            env[f"ANTIPHON_{stage}_ADDRESSES"] = json.dumps(addresses)
    return env


def silent(metrics_ports: list[int]) -> list[int]:
    """The ports of `metrics_ports` where no worker answers."""
    return [port for port in metrics_ports if not scrape([port])]


def await_workers(metrics_ports: list[int], timeout_s: float = 60.0) -> None:
    """Until every worker process the bench counts answers on its metrics port.

    A ready gateway says one stage0 answers, not that all of them do; a level
    measured with fewer workers than its report names says the wrong thing."""
    deadline = time.monotonic() + timeout_s
    while missing := silent(metrics_ports):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no worker answers on metrics ports {missing}")
        time.sleep(0.5)


class LoadStack:
    """A started stack of `backend` and its sampler (the load generator counted alone:
    its children are the services themselves). `profile`: the deploy profile the
    services read; `front_ends`: stage0's worker processes (its `llm_front_ends`),
    front end k on the stage0 port + k, every one of them given to the session;
    `voices`: stage1's (its `worker_processes`), alike; `session_replicas`: session
    processes behind the gateway's round-robin channel."""

    def __init__(
        self,
        backend: str,
        env: dict[str, str],
        profile: Path = DEFAULT_PROFILE,
        front_ends: int = 1,
        voices: int = 1,
        session_replicas: int = 1,
    ) -> None:
        self.env = env
        ports = Ports.free()
        self.stage0_metrics_ports = [ports.stage0_metrics + k for k in range(front_ends)]
        self.stage1_metrics_ports = [ports.stage1_metrics + k for k in range(voices)]
        env = env | worker_env(ports, front_ends, voices)
        self.stack = LocalStack(
            ports=ports, extra_env=env, profile=profile, session_replicas=session_replicas
        )
        t0 = time.monotonic()
        print(f"starting the {backend} stack (logs in {self.stack.run_dir}) ...", file=sys.stderr)
        try:
            self.stack.start(timeout_s=600)
            await_workers(
                self.stage0_metrics_ports
                + self.stage1_metrics_ports
                + self.stack.session_metrics_ports
            )
        except BaseException:
            self.stack.stop()
            raise
        self.startup_s = round(time.monotonic() - t0, 1)
        pids = {name: p.pid for name, p in self.stack.procs.items()}
        self.sampler = ProcSampler(
            {**pids, "loadgen": os.getpid()}, alone=frozenset({"loadgen"})
        ).start()

    def sessions_active(self) -> int | None:
        """The session replicas' own count of the sessions they run (their metrics)."""
        active = scrape(self.stack.session_metrics_ports).get("antiphon_session_sessions_active")
        return None if active is None else int(active)

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
        # The duplex dialect: the load client uses its heartbeats, session.close,
        # barge-in signal and the native lane.
        return f"ws://127.0.0.1:{self.stack.ports.gateway}/v1/realtime?duplex=1"

    def stop(self) -> None:
        self.sampler.stop()
        self.stack.stop()


# What the stages report of a level, from their own metrics: Whisper's time
# per utterance, the LLM's time to first token, stage1's first text -> first
# audio and its three parts (the first clause's words, the wait for the voice
# thread, the voice), the batched voice's wait for a batch and a batch's run
# (every sentence's, not only first clauses'), how late each worker's event
# loop ran (time no stage's own clock holds: all a worker does waits on that
# loop), the same for the session and the gateway (every audio append and
# every answer's audio passes their single loops), and how full the batched
# engines' batches were.
STAGE0_SECONDS = (
    "antiphon_stage0_asr_seconds",
    "antiphon_stage0_ttft_seconds",
    "antiphon_stage0_event_loop_lag_seconds",
)
STAGE1_SECONDS = (
    "antiphon_stage1_first_audio_seconds",
    "antiphon_stage1_first_audio_words_seconds",
    "antiphon_stage1_first_audio_queue_seconds",
    "antiphon_stage1_first_audio_voice_seconds",
    "antiphon_stage1_tts_batch_wait_seconds",
    "antiphon_stage1_tts_batch_run_seconds",
    "antiphon_stage1_event_loop_lag_seconds",
)
RELAY_SECONDS = (
    "antiphon_session_event_loop_lag_seconds",
    "antiphon_gateway_event_loop_lag_seconds",
)
BATCHES = (
    "antiphon_stage0_vad_batch_size",
    "antiphon_stage0_asr_batch_size",
    "antiphon_stage0_turn_batch_size",
    "antiphon_stage1_tts_batch_size",
)
# How the GPU engines' batches ran with CUDA graphs: replayed, or op by op.
GRAPH_RUNS = {
    "stage0_asr_graph_batches": ("antiphon_stage0_asr_graph_batches_total", ("graphs", "ops")),
    "stage1_tts_graph_batches": ("antiphon_stage1_tts_graph_batches_total", ("graphs", "nodes")),
}


class StageLatencies:
    """The stages' latency histograms over one level: made before it, `delta()` after.
    p50 and p95 are bucket bounds (at most), as Prometheus would interpolate them;
    the mean is exact."""

    def __init__(
        self, stage0_ports: list[int], stage1_ports: list[int], relay_ports: Sequence[int] = ()
    ) -> None:
        self._ports = [*stage0_ports, *stage1_ports, *relay_ports]
        self._before = scrape(self._ports)

    def delta(self) -> dict[str, Any]:
        after = scrape(self._ports)
        out: dict[str, Any] = {}
        for name in (*STAGE0_SECONDS, *STAGE1_SECONDS, *RELAY_SECONDS):
            d = histogram_delta(self._before, after, name)
            short = name.removeprefix("antiphon_").removesuffix("_seconds")
            out[short] = {
                "count": d["calls"],
                "mean_ms": round(d["sum"] / d["calls"] * 1000, 1) if d["calls"] else None,
                **{
                    f"p{q}_ms_at_most": None
                    if (b := bucket_quantile(d, q / 100)) is None
                    else b * 1000
                    for q in (50, 95, 99)
                },
            }
        for name in BATCHES:
            d = histogram_delta(self._before, after, name)
            out[name.removeprefix("antiphon_")] = {"batches": d["calls"], "mean": d["mean"]}
        for short, (name, runs) in GRAPH_RUNS.items():
            out[short] = {
                run: int(
                    after.get(f'{name}{{run="{run}"}}', 0.0)
                    - self._before.get(f'{name}{{run="{run}"}}', 0.0)
                )
                for run in runs
            }
        return out
