"""The faults, one after another, and what each cost: loss, repeats, stuck responses,
and the time until every session completed a response again."""

from __future__ import annotations

import asyncio
import signal
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bench.faults.client import FaultClient
from bench.faults.cluster import FaultCluster


@dataclass
class Fault:
    name: str
    # Injects the fault; returns the process to restart afterwards ("" for none).
    inject: Callable[[], Awaitable[str]]


def faults(
    fc: FaultCluster, clients: list[FaultClient], cut_s: float, pause_s: float = 10.0
) -> list[Fault]:
    def ids() -> list[str]:
        return [c.ledger.session_id for c in clients if not c.failed]

    async def none() -> str:
        return ""

    async def kill(name: str) -> str:
        await asyncio.to_thread(fc.stack.kill, name)
        return name

    async def kill_busiest(field_: str) -> str:
        return await kill(await fc.busiest(field_, ids()))

    async def restart_redis() -> str:
        await asyncio.to_thread(fc.stack.restart_redis)
        return ""

    async def pause_redis() -> str:
        # An AOF rewrite stall or a Sentinel fail-over: Redis answers nothing,
        # for longer than the owner lease.
        redis = fc.stack.procs["redis"]
        redis.send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(pause_s)
        finally:
            redis.send_signal(signal.SIGCONT)
        return ""

    async def cut() -> str:
        # Cut gateway 2 from every replica at once, and heal together.
        await asyncio.gather(*(p.cut(cut_s) for p in fc.proxies))
        return ""

    return [
        Fault("none", none),
        Fault("kill_gateway", lambda: kill("gateway")),
        Fault("kill_session_replica", lambda: kill_busiest("replica")),
        Fault("kill_stage0", lambda: kill_busiest("stage0")),
        Fault("kill_stage1", lambda: kill_busiest("stage1")),
        Fault("restart_redis", restart_redis),
        Fault(f"pause_redis_{pause_s:g}s", pause_redis),
        Fault(f"cut_gateway_session_link_{cut_s:g}s", cut),
    ]


def totals(clients: list[FaultClient]) -> dict[str, int]:
    return {
        "lost": sum(c.ledger.lost() for c in clients),
        "repeated": sum(c.ledger.repeated for c in clients),
        "conflicting": sum(c.ledger.conflicting for c in clients),
        "resumes": sum(c.ledger.resumes for c in clients),
    }


async def run_fault(
    fault: Fault, fc: FaultCluster, clients: list[FaultClient], window_s: float
) -> dict[str, Any]:
    before = totals(clients)
    t0 = time.monotonic()
    victim = await fault.inject()
    injected_s = time.monotonic() - t0
    # Recovered: every session still running has completed a response since the fault.
    recovery: dict[int, float] = {}
    deadline = t0 + window_s
    while time.monotonic() < deadline:
        for c in clients:
            if c.index in recovery or c.failed:
                continue
            done = [t for t, status, _ in c.ledger.outcomes if t > t0 and status == "completed"]
            if done:
                recovery[c.index] = min(done) - t0
        if len(recovery) == sum(1 for c in clients if not c.failed):
            break
        await asyncio.sleep(0.2)
    t_end = time.monotonic()
    after = totals(clients)
    outcomes: Counter[str] = Counter()
    for c in clients:
        for t, status, reason in c.ledger.outcomes:
            if t0 < t <= t_end and status != "completed":
                outcomes[f"{status}:{reason}"] += 1
    times = sorted(recovery.values())
    result: dict[str, Any] = {
        "fault": fault.name,
        # Wall clock, to find the fault in the services' logs.
        "at": time.strftime("%H:%M:%S", time.gmtime(time.time() - (t_end - t0))),
        "victim": victim,
        "inject_s": round(injected_s, 2),
        "recovered_sessions": len(recovery),
        "sessions": sum(1 for c in clients if not c.failed),
        "recovery_s": {
            "p50": round(statistics.median(times), 2) if times else None,
            "max": round(times[-1], 2) if times else None,
        },
        "lost": after["lost"] - before["lost"],
        "repeated": after["repeated"] - before["repeated"],
        "conflicting": after["conflicting"] - before["conflicting"],
        # Created before the fault and still without a response.done once all recovered.
        "stuck": sum(c.ledger.stuck(before=t0) for c in clients),
        "client_resumes": after["resumes"] - before["resumes"],
        "not_completed": dict(outcomes),
    }
    if victim:
        t = time.monotonic()
        await asyncio.to_thread(fc.restart, victim)
        result["restart_s"] = round(time.monotonic() - t, 2)
    return result
