"""The stack a load or soak run serves from: deploy/local/stack.py's processes with the
limits raised, and a sampler of each service's CPU and memory."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from bench.lib.procstats import ProcSampler
from bench.lib.prometheus import scrape
from deploy.local.stack import LocalStack, Ports


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


class LoadStack:
    """A started stack of `backend` and its sampler (the load generator counted alone:
    its children are the services themselves)."""

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
        active = scrape([self.stack.ports.session_metrics]).get("antiphon_session_sessions_active")
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
