"""Resume latency, takeover time and replica memory, on the two-replica cluster (synthetic stages).

    python -m bench.survival --resumes 50 --takeovers 5 --churn 200

Resume latency: a new socket sends `session.resume` asking for the last
100 journaled events; measured on the client's clock from opening the
socket to receiving the 100th replayed event. Takeover time: `kill -9` of
the replica that owns an attached session, to the client receiving
`session.resumed` (its gateway resumed the session on the other replica).
Replica memory: the RSS of the session replica before and after `--churn`
short sessions (opened, 200 ms of silence, closed), five at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import psutil

from bench.lib.cluster import Cluster, running_cluster
from bench.lib.realtime import MANUAL, RealtimeClient
from bench.lib.results import RESULTS, write_json
from bench.lib.stats import pct

REPLAYED = 100


async def resume_latency(cluster: Cluster, rounds: int) -> list[float]:
    client = await RealtimeClient.connect(cluster.url(1))
    # Resumable: each round closes its socket cleanly, then resumes on a new one.
    created = await client.open(**MANUAL, resumable=True)
    for _ in range(REPLAYED):  # each heartbeat_ack is one journaled event
        await client.send("session.heartbeat")
    head = (await client.until(lambda e: e["server_event_seq"] == REPLAYED + 2))["server_event_seq"]
    await client.ws.close()
    token, samples = created["resume_token"], []
    for _ in range(rounds):
        t0 = time.monotonic()
        again = await RealtimeClient.connect(cluster.url(2, "?autostart=0"))
        await again.send(
            "session.resume",
            session_id=created["session"]["id"],
            incarnation=created["incarnation"],
            resume_token=token,
            last_received_server_event_seq=head - REPLAYED,
        )
        resumed = await again.until(lambda e: e["type"] == "session.resumed")
        await again.until(
            lambda e: e["server_event_seq"] == head and e["type"] != "session.resumed"
        )
        samples.append((time.monotonic() - t0) * 1000)
        token = resumed["resume_token"]
        await again.ws.close()
    return samples


async def takeover_time(cluster: Cluster, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        client = await RealtimeClient.connect(cluster.url(1))
        created = await client.open(**MANUAL)
        owner = await cluster.owner_of(created["session"]["id"])
        t0 = time.monotonic()
        cluster.stack.kill(owner)
        await client.until(lambda e: e["type"] == "session.resumed", timeout=30)
        samples.append((time.monotonic() - t0) * 1000)
        await client.close()
        cluster.restart(owner)
        await asyncio.sleep(2.0)  # the restarted replica comes up
    return samples


async def churn_rss(cluster: Cluster, sessions: int) -> dict[str, float]:
    """The replica's RSS (MiB) after one session, then after `sessions` more."""
    replica = psutil.Process(cluster.stack.procs["session"].pid)

    async def one() -> None:
        c = await RealtimeClient.connect(cluster.url(1))
        try:
            await c.open(**MANUAL)
            await c.append(b"\x00\x00" * 4800)  # 200 ms of silence at 24 kHz
        finally:
            await c.close()

    await one()  # the allocations of a first session
    before = replica.memory_info().rss / 2**20
    for _ in range(sessions // 5):
        await asyncio.gather(*(one() for _ in range(5)))
    after = replica.memory_info().rss / 2**20
    return {
        "sessions": sessions,
        "before": round(before, 1),
        "after": round(after, 1),
        "growth": round(after - before, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.survival", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--resumes", type=int, default=50)
    parser.add_argument("--takeovers", type=int, default=5)
    parser.add_argument("--churn", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS / "survival.json")
    args = parser.parse_args()
    with running_cluster(max_sessions=50, grace_s=30, replay_ttl_s=60) as cluster:
        resume = asyncio.run(resume_latency(cluster, args.resumes))
        takeover = asyncio.run(takeover_time(cluster, args.takeovers))
        memory = asyncio.run(churn_rss(cluster, args.churn))
    report: dict[str, Any] = {
        "resume_latency_ms_100_events": {
            "n": len(resume),
            "p50": pct(resume, 50, 1),
            "p99": pct(resume, 99, 1),
            "max": round(max(resume), 1),
        },
        "takeover_after_kill9_ms": {
            "n": len(takeover),
            "p50": round(statistics.median(takeover), 1),
            "max": round(max(takeover), 1),
            "all": [round(t, 1) for t in takeover],
        },
        "replica_rss_mib_over_churn": memory,
    }
    write_json(args.out, report)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
