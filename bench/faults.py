"""Faults under load: kill -9 each tier in turn, restart Redis, cut a gateway's link.

    python bench/faults.py --sessions 50

The cluster (synthetic stages, real processes): Redis with AOF, two stage0
and two stage1 workers, two session replicas (A, B) and two gateways. Gateway 1
talks to the replicas directly; gateway 2 through a `TcpProxy` per replica,
so its link to the session tier can be cut with both ends up. Half the
sessions open on each gateway; each runs manual-lane turns of the load
client (`antiphon.client.load`: paced 200 ms appends, a commit,
`response.create`, to `response.done`) until the run ends. A socket that
dies is resumed inside the client (`DuplexClient`: `session.resume` with the
last seq it holds) on the other gateway.

The faults, one after another, each once the previous one has healed:
`none` (the control: what "recovered" costs without a fault), kill -9 of
gateway 1 (its clients resume on gateway 2 with `session.resume`, as a
client of a dead gateway must), of the replica owning most sessions (the
gateways resume them on the other), of the stage0 and the stage1 worker
bound to most sessions (the next turn binds to the other), a Redis restart,
and a cut of gateway 2's link to every replica for `--cut-s` seconds
(dropped, then refused). A killed process is restarted after its fault.

Counted over every socket a session had, by `server_event_seq` (every
journaled event carries the next one; a resume asks for what follows the
last one received):

- `lost`: a seq below the highest one received that never arrived, or a
  `session.resync_required` (the journal could not fill a resume);
- `repeated`: a seq received twice (`conflicting`: with another event_id);
- `stuck`: a `response.created` whose `response.done` never came.

All three must be 0. Time to recovery: from the fault to each session's
first `completed` response after it (max and p50 over sessions; the control
shows what a healthy turn takes). Results go to `bench/results/faults.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "deploy" / "local")]

import numpy as np  # noqa: E402
import redis.asyncio as aioredis  # noqa: E402
from stack import LocalStack, Ports, free_port  # noqa: E402

from antiphon.client import Event, Reconnect  # noqa: E402
from antiphon.client.events import Resumed  # noqa: E402
from antiphon.client.load import (  # noqa: E402
    INPUT_RATE,
    MANUAL,
    LoadClient,
    LoadSession,
    Question,
    SessionError,
    manual_question,
    raise_fd_limit,
    run_async,
)
from bench.load import git_commit  # noqa: E402
from bench.tcpproxy import TcpProxy  # noqa: E402
from tests.support.cluster import Cluster  # noqa: E402

# Attachment-scoped events carry a cursor, not a journal position.
UNJOURNALED = frozenset({"session.resumed", "session.replaced", "session.resync_required"})
STAGE_SERVICES = {"stage0": "antiphon.v1.Stage0Service", "stage1": "antiphon.v1.Stage1Service"}


# ------------------------------------------------------------------ ledger
@dataclass
class Ledger:
    """What one session's client received, over all of its sockets: every
    frame as read, before the client drops what a replay repeats."""

    session_id: str = ""
    seqs: dict[int, str] = field(default_factory=dict)  # seq -> event_id
    repeated: int = 0
    conflicting: int = 0
    resyncs: int = 0
    resumes: int = 0
    created: dict[str, float] = field(default_factory=dict)  # response id -> client time
    done: dict[str, str] = field(default_factory=dict)  # response id -> status
    # (client time, status, reason) of every response.done.
    outcomes: list[tuple[float, str, str]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def last_seq(self) -> int:
        return max(self.seqs, default=0)

    def lost(self) -> int:
        return self.last_seq - len(self.seqs) + self.resyncs

    def stuck(self, before: float = float("inf")) -> int:
        return sum(1 for rid, t in self.created.items() if t < before and rid not in self.done)

    def frame(self, direction: str, ev: dict[str, Any]) -> None:
        """The client's `on_frame`: every frame in ("<") goes in the ledger."""
        if direction == "<":
            self.record(time.monotonic(), ev)

    def record(self, t: float, ev: dict[str, Any]) -> None:
        kind = ev.get("type", "")
        seq = ev.get("server_event_seq") or 0
        if kind not in UNJOURNALED and seq > 0:
            eid = ev.get("event_id", "")
            if seq in self.seqs:
                self.repeated += 1
                self.conflicting += self.seqs[seq] != eid
            else:
                self.seqs[seq] = eid
        if kind == "session.created":
            self.session_id = ev["session"]["id"]
        elif kind == "session.resync_required":
            self.resyncs += 1
        elif kind == "response.created":
            self.created.setdefault(ev["response"]["id"], t)
        elif kind == "response.done":
            r = ev["response"]
            self.done[r["id"]] = r.get("status", "")
            reason = (r.get("status_details") or {}).get("reason") or ""
            error = ((r.get("status_details") or {}).get("error") or {}).get("code") or ""
            self.outcomes.append((t, r.get("status", ""), error or reason))
        elif kind == "error":
            self.errors[(ev.get("error") or {}).get("code") or "error"] += 1


# ------------------------------------------------------------------ cluster
class FaultCluster:
    """`tests/support/cluster.py`'s two replicas and two gateways, two workers per
    stage, and gateway 2 behind a proxy per replica."""

    def __init__(self, sessions: int, token_ms: int, grace_s: float) -> None:
        ports = Ports.free()
        self.spare = {"stage0": free_port(), "stage1": free_port()}
        env = {
            "ANTIPHON_BACKEND": "synthetic",
            # Room for every session on either replica and on either worker.
            "ANTIPHON_MAX_SESSIONS": str(2 * sessions + 16),
            "ANTIPHON_CAPACITY": str(2 * sessions + 16),
            "ANTIPHON_DISCONNECT_GRACE_S": str(grace_s),
            "ANTIPHON_RESUME_REPLAY_TTL_S": "300",
            "ANTIPHON_OWNER_LEASE_S": "2",
            "ANTIPHON_REAPER_INTERVAL_S": "1",
            # Slow enough that a fault finds responses streaming.
            "ANTIPHON_SYNTHETIC_TOKEN_MS": str(token_ms),
            "ANTIPHON_STAGE0_ADDRESSES": json.dumps(
                [f"127.0.0.1:{ports.stage0}", f"127.0.0.1:{self.spare['stage0']}"]
            ),
            "ANTIPHON_STAGE1_ADDRESSES": json.dumps(
                [f"127.0.0.1:{ports.stage1}", f"127.0.0.1:{self.spare['stage1']}"]
            ),
        }
        self.stack = LocalStack(ports=ports, extra_env=env)
        self.cluster = Cluster(self.stack)
        env["ANTIPHON_SESSION_FALLBACK_ADDRESSES"] = json.dumps(
            [f"127.0.0.1:{self.cluster.session_b}"]
        )
        self.proxies = [
            TcpProxy(("127.0.0.1", ports.session), free_port()),
            TcpProxy(("127.0.0.1", self.cluster.session_b), free_port()),
        ]

    async def start(self) -> None:
        for proxy in self.proxies:
            await proxy.start()
        # Blocking waits on a thread: the proxies serve on this loop meanwhile.
        await asyncio.to_thread(self._start_processes)

    def _start_processes(self) -> None:
        s = self.stack
        s.start(timeout_s=180)
        self.cluster.start_replica_b()
        for stage, port in self.spare.items():
            s.spawn_grpc(f"{stage}_b", stage, port, free_port())
            s.wait_grpc_ready(port, STAGE_SERVICES[stage])
        self.spawn_gateway2()

    def spawn_gateway2(self) -> None:
        a, b = self.proxies
        self.stack.spawn_gateway(
            "gateway2",
            self.cluster.gateway2,
            ANTIPHON_SESSION_ADDRESS=a.address,
            ANTIPHON_SESSION_FALLBACK_ADDRESSES=json.dumps([b.address]),
        )
        self.stack.wait_ready(60, gateway_port=self.cluster.gateway2)

    def url(self, gateway: int, query: str = "") -> str:
        return self.cluster.url(gateway, query)

    async def busiest(self, field_: str, session_ids: list[str]) -> str:
        """The process the most sessions are bound to in `field_` (replica, stage0, stage1)."""
        r = aioredis.Redis.from_url(self.stack.redis_url)
        try:
            counts: Counter[str] = Counter()
            for sid in session_ids:
                raw: bytes | None = await r.hget(  # type: ignore[assignment]
                    f"ap:{{{sid}}}:session", field_
                )
                counts[(raw or b"").decode()] += 1
        finally:
            await r.aclose()
        address = counts.most_common(1)[0][0] if counts else ""
        p = self.stack.ports
        if field_ == "replica":
            return "session_b" if address.endswith(f":{self.cluster.session_b}") else "session"
        own = p.stage0 if field_ == "stage0" else p.stage1
        return field_ if address.endswith(f":{own}") else f"{field_}_b"

    def restart(self, name: str) -> None:
        s, p = self.stack, self.stack.ports
        if name == "gateway":
            s.spawn_gateway("gateway", p.gateway)
            s.wait_ready(60)
        elif name in ("session", "session_b"):
            self.cluster.restart(name)
        else:
            stage = name.removesuffix("_b")
            port = self.spare[stage] if name.endswith("_b") else getattr(p, stage)
            s.spawn_grpc(name, stage, port, free_port())
            s.wait_grpc_ready(port, STAGE_SERVICES[stage])

    async def stop(self) -> None:
        await asyncio.to_thread(self.stack.stop)
        for proxy in self.proxies:
            await proxy.close()


# ------------------------------------------------------------------ client
# A lost connection is resumed inside the client, for up to about a minute.
RECONNECT = Reconnect(attempts=80, first_delay_s=0.1, max_delay_s=1.0)


class FaultClient:
    """One session of the run: turns of the load client (`antiphon.client.load`),
    resumed inside the client on the other gateway when its socket dies.

    The client resumes at its `url`; that is always the other gateway's, so a
    client of a dead gateway resumes through the live one, as a client behind
    a load balancer would."""

    def __init__(self, index: int, cluster: FaultCluster, question: Question) -> None:
        self.index = index
        self.gateway = 1 + index % 2
        self.cluster = cluster
        self.question = question
        self.ledger = Ledger()
        self.client = LoadClient(
            cluster.url(self.gateway),
            session=MANUAL,
            reconnect=RECONNECT,
            heartbeat_s=0,
            open_timeout_s=10,
            on_frame=self.ledger.frame,
        )
        self.session = LoadSession(index, self.client)
        self.client.add_listener(self._on_event)
        self.turns: Counter[str] = Counter()
        self.failed = ""  # why the session could not go on, if it could not

    def _on_event(self, event: Event) -> None:
        if isinstance(event, Resumed):
            self.ledger.resumes += 1
            self.gateway = 3 - self.gateway
            self.client.url = self.cluster.url(3 - self.gateway)

    async def open(self) -> None:
        await self.session.start()
        self.client.url = self.cluster.url(3 - self.gateway)

    async def run(self, stop: asyncio.Event, pause_s: float) -> None:
        turn = 0
        while not stop.is_set():
            try:
                r = await self.session.turn(turn, self.question, time.monotonic(), 30, grace_s=0)
                self.turns[r.status] += 1
            except SessionError as exc:
                # The client could not resume it (refused, or out of attempts).
                self.failed = exc.code
                return
            turn += 1
            await asyncio.sleep(pause_s)

    async def finish(self) -> None:
        """Everything the session sent is in (a heartbeat is answered in order), then close."""
        if not self.failed:
            try:
                if await self.session.heartbeat(30) is None:
                    self.ledger.errors["final_heartbeat_lost"] += 1
            except SessionError:
                self.ledger.errors["final_heartbeat_lost"] += 1
        await self.session.close()


# ------------------------------------------------------------------ faults
@dataclass
class Fault:
    name: str
    # Injects the fault; returns the process to restart afterwards ("" for none).
    inject: Callable[[], Awaitable[str]]


def faults(fc: FaultCluster, clients: list[FaultClient], cut_s: float) -> list[Fault]:
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
        Fault(f"cut_gateway_session_link_{cut_s:g}s", cut),
    ]


def _totals(clients: list[FaultClient]) -> dict[str, int]:
    return {
        "lost": sum(c.ledger.lost() for c in clients),
        "repeated": sum(c.ledger.repeated for c in clients),
        "conflicting": sum(c.ledger.conflicting for c in clients),
        "resumes": sum(c.ledger.resumes for c in clients),
    }


async def run_fault(
    fault: Fault, fc: FaultCluster, clients: list[FaultClient], window_s: float
) -> dict[str, Any]:
    before = _totals(clients)
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
    after = _totals(clients)
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


async def run(args: argparse.Namespace) -> dict[str, Any]:
    fc = FaultCluster(args.sessions, args.token_ms, args.grace_s)
    t_start = time.monotonic()
    print(f"starting the cluster (logs in {fc.stack.run_dir}) ...", file=sys.stderr)
    await fc.start()
    startup_s = time.monotonic() - t_start
    rng = np.random.default_rng(0)
    # Any sound will do: the synthetic ASR hears its length, not its words.
    pcm = rng.normal(0, 3000, INPUT_RATE * args.audio_ms // 1000).clip(-32768, 32767)
    question = manual_question("noise", pcm.astype("<i2").tobytes())
    clients = [FaultClient(i, fc, question) for i in range(args.sessions)]
    report: dict[str, Any] = {"startup_s": round(startup_s, 1), "faults": []}
    stop = asyncio.Event()
    drivers: list[asyncio.Task[None]] = []
    try:
        gate = asyncio.Semaphore(16)

        async def open_one(c: FaultClient) -> None:
            async with gate:
                await c.open()

        await asyncio.gather(*(open_one(c) for c in clients))
        drivers = [asyncio.create_task(c.run(stop, args.pause_s)) for c in clients]
        await asyncio.sleep(args.warmup_s)
        for fault in faults(fc, clients, args.cut_s):
            if args.only and fault.name not in args.only and fault.name != "none":
                continue
            print(f"fault: {fault.name} ...", file=sys.stderr)
            result = await run_fault(fault, fc, clients, args.window_s)
            report["faults"].append(result)
            print(f"  {json.dumps(result)}", file=sys.stderr)
            await asyncio.sleep(args.settle_s)
        stop.set()
        await asyncio.gather(*drivers)
        await asyncio.gather(*(c.finish() for c in clients))
    finally:
        stop.set()
        for task in drivers:
            task.cancel()
        await fc.stop()
    turns: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for c in clients:
        turns.update(c.turns)
        errors.update(c.ledger.errors)
    report["totals"] = {
        **_totals(clients),
        "stuck": sum(c.ledger.stuck() for c in clients),
        "sessions_failed": {c.index: c.failed for c in clients if c.failed},
        "turns": dict(turns),
        "errors": dict(errors),
        "events": sum(len(c.ledger.seqs) for c in clients),
        "responses": sum(len(c.ledger.created) for c in clients),
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--audio-ms", type=int, default=1000, help="audio per turn")
    parser.add_argument("--pause-s", type=float, default=0.5, help="between a session's turns")
    parser.add_argument("--token-ms", type=int, default=100, help="the scripted LLM's pace")
    parser.add_argument("--grace-s", type=float, default=30.0, help="disconnect grace")
    parser.add_argument("--cut-s", type=float, default=5.0, help="how long the link is cut")
    parser.add_argument("--warmup-s", type=float, default=5.0)
    parser.add_argument("--window-s", type=float, default=60.0, help="most a recovery may take")
    parser.add_argument("--settle-s", type=float, default=3.0, help="after each fault")
    parser.add_argument("--only", nargs="*", default=[], help="fault names to run")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "faults.json")
    args = parser.parse_args()
    raise_fd_limit(args.sessions * 4 + 256)
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": git_commit(),
        "sessions": args.sessions,
        **run_async(run(args)),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{'fault':<36} {'victim':<10} {'lost':>4} {'rep':>4} {'stuck':>5} "
          f"{'recovered':>9} {'p50 s':>6} {'max s':>6}")  # fmt: skip
    for f in report["faults"]:
        rec = f["recovery_s"]
        print(
            f"{f['fault']:<36} {f['victim'] or '-':<10} {f['lost']:>4} {f['repeated']:>4} "
            f"{f['stuck']:>5} {f['recovered_sessions']:>4}/{f['sessions']:<4} "
            f"{rec['p50'] if rec['p50'] is not None else '-':>6} "
            f"{rec['max'] if rec['max'] is not None else '-':>6}"
        )
    t = report["totals"]
    print(
        f"total: {t['lost']} lost, {t['repeated']} repeated, {t['stuck']} stuck of "
        f"{t['events']} events and {t['responses']} responses; "
        f"{len(t['sessions_failed'])} sessions failed; turns {t['turns']}"
    )
    print(f"written to {args.out}")
    ok = not (t["lost"] or t["repeated"] or t["stuck"] or t["sessions_failed"])
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
