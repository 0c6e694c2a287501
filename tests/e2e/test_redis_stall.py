"""A Redis stall is ridden out: no session lost, none told it was replaced.

Real processes throughout: two session replicas behind one gateway, their
own Redis (AOF on), the `synthetic` stage backends (the models are not what
is tested here). Twenty sessions ask for answers back to back while Redis is
paused with SIGSTOP, as an AOF rewrite stall or a Sentinel fail-over pauses
it: first for 10 s, then for 30 s, which outlasts both the owner lease and
the disconnect grace period. Every client's ledger (every frame as read)
must show every event once and in order, and every response done.

In the second stall another replica really takes one more session over (a
resume straight to it, issued while Redis is paused): that session's old
attachment, and only that one, ends with `session.replaced`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import redis.asyncio as aioredis
from stack import LocalStack, Ports

from antiphon.client.load import (
    INPUT_RATE,
    MANUAL,
    LoadClient,
    LoadSession,
    Question,
    SessionError,
    manual_question,
)
from antiphon.session.state import keys
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import session_pb2_grpc
from bench.faults.ledger import Ledger
from tests.support.realtime import duplex_url
from tests.support.stacks import started

pytestmark = pytest.mark.stack

SESSIONS = 20
LEASE_S = 6.0  # the default owner lease: both stalls outlast it
GRACE_S = 15.0  # the 30 s stall outlasts the disconnect grace too
# What one session replica may reach, stall or not (it idles near 110 MB).
RSS_BOUND_MB = 300


@pytest.fixture(scope="module")
def stack(request: pytest.FixtureRequest) -> Iterator[LocalStack]:
    env = {
        "ANTIPHON_BACKEND": "synthetic",
        "ANTIPHON_MAX_SESSIONS": str(2 * SESSIONS),
        "ANTIPHON_CAPACITY": str(2 * SESSIONS),
        "ANTIPHON_OWNER_LEASE_S": str(LEASE_S),
        "ANTIPHON_DISCONNECT_GRACE_S": str(GRACE_S),
        "ANTIPHON_REAPER_INTERVAL_S": "1",
        # Answers stream for about a second: a stall always lands mid-answer.
        "ANTIPHON_SYNTHETIC_TOKEN_MS": "60",
    }
    # No redis_url: the stack starts a Redis of its own, which this test pauses.
    s = LocalStack(ports=Ports.free(), extra_env=env, session_replicas=2)
    with started(request, s) as running:
        yield running


class Speaker:
    """One session asking for answers back to back, its ledger of every frame."""

    def __init__(self, index: int, url: str, question: Question) -> None:
        self.ledger = Ledger()
        self.created: dict[str, object] = {}
        self.replaced = 0
        self.client = LoadClient(
            url,
            session=MANUAL,
            heartbeat_s=0,
            open_timeout_s=10,
            # A dropped socket is a failure here, not something to resume.
            reconnect=None,
            on_frame=self._frame,
        )
        self.session = LoadSession(index, self.client)
        self.question = question
        self.turns: list[str] = []
        self.failed = ""

    def _frame(self, direction: str, ev: dict[str, object]) -> None:
        self.ledger.frame(direction, ev)
        if direction == "<" and ev.get("type") == "session.created":
            self.created = ev
        if direction == "<" and ev.get("type") == "session.replaced":
            self.replaced += 1

    async def run(self, stop: asyncio.Event) -> None:
        turn = 0
        while not stop.is_set():
            try:
                # Longer than the longest stall: an answer waits it out.
                r = await self.session.turn(turn, self.question, time.monotonic(), 60, grace_s=0)
            except SessionError as exc:
                self.failed = exc.code
                return
            self.turns.append(r.status)
            turn += 1

    def completed(self) -> int:
        return sum(status == "completed" for status in self.turns)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextlib.asynccontextmanager
async def paused(stack: LocalStack, seconds: float, peak: dict[str, float]) -> AsyncIterator[None]:
    """Redis stopped for `seconds` (the body runs meanwhile); the replicas'
    peak RSS sampled throughout."""
    redis = stack.procs["redis"]
    redis.send_signal(signal.SIGSTOP)
    try:
        yield
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for name in stack.session_names:
                peak[name] = max(peak.get(name, 0.0), rss_mb(stack.procs[name].pid))
            await asyncio.sleep(0.25)
    finally:
        redis.send_signal(signal.SIGCONT)


async def progress(speakers: list[Speaker], turns: int, timeout_s: float) -> None:
    """Until every speaker has completed `turns` more answers."""
    goal = [s.completed() + turns for s in speakers]
    deadline = time.monotonic() + timeout_s
    while any(s.completed() < g and not s.failed for s, g in zip(speakers, goal, strict=True)):
        assert time.monotonic() < deadline, [s.turns[-3:] for s in speakers]
        await asyncio.sleep(0.2)


async def owner_port(stack: LocalStack, session_id: str) -> int:
    r = aioredis.Redis.from_url(stack.redis_url)
    try:
        raw = await r.hget(keys.session(session_id), "replica")  # type: ignore[misc]
    finally:
        await r.aclose()
    assert isinstance(raw, bytes)
    return int(raw.decode().rsplit(":", 1)[1])


async def take_over(port: int, created: dict[str, object]) -> spb.ServerEvent:
    """A resume straight to the replica on `port`, as a gateway failing over
    would send it; its first event (`session.resumed`, once Redis answers)."""
    session = created["session"]
    assert isinstance(session, dict)
    resume = spb.ResumeSession(
        session_id=str(session["id"]),
        incarnation=int(str(created["incarnation"])),
        resume_token=str(created["resume_token"]),
        last_received_seq=0,
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = session_pb2_grpc.SessionServiceStub(ch).Connect(
            iter([spb.ClientCommand(resume=resume)])
        )
        first: spb.ServerEvent = await call.read()  # type: ignore[assignment]
        call.cancel()
        return first


async def test_twenty_sessions_ride_out_a_10_s_and_a_30_s_redis_stall(stack: LocalStack) -> None:
    rng = np.random.default_rng(0)
    # Any sound will do: the synthetic ASR hears its length, not its words.
    pcm = rng.normal(0, 3000, INPUT_RATE * 600 // 1000).clip(-32768, 32767)
    question = manual_question("noise", pcm.astype("<i2").tobytes())
    url = duplex_url(stack.ports.gateway)
    speakers = [Speaker(k, url, question) for k in range(SESSIONS)]
    victim = Speaker(SESSIONS, url, question)
    for s in [*speakers, victim]:
        await s.session.start()
    stop = asyncio.Event()
    drivers = [asyncio.create_task(s.run(stop)) for s in [*speakers, victim]]
    peak: dict[str, float] = {}
    try:
        await progress(speakers, 2, 60)
        async with paused(stack, 10, peak):
            pass
        await progress(speakers, 3, 90)

        victim_session = victim.created["session"]
        assert isinstance(victim_session, dict)
        owner = await owner_port(stack, str(victim_session["id"]))
        other = next(
            stack.ports.session + k
            for k in range(stack.session_replicas)
            if stack.ports.session + k != owner
        )
        async with paused(stack, 30, peak):
            # Issued while Redis is paused; it completes once Redis answers.
            takeover = asyncio.create_task(take_over(other, victim.created))
        first = await asyncio.wait_for(takeover, 30)
        assert first.WhichOneof("kind") == "session_resumed"
        await progress(speakers, 3, 120)
    finally:
        stop.set()
        await asyncio.wait(drivers, timeout=90)
    for s in speakers:
        if not s.failed:
            # Answered in order: once acked, every event before it is in.
            assert await s.session.heartbeat(30) is not None
        await s.session.close()
    await victim.session.close()

    assert victim.replaced == 1
    for s in speakers:
        ledger = s.ledger
        assert not s.failed, (s.session.index, s.failed, s.turns)
        assert s.replaced == 0
        assert set(s.turns) == {"completed"}, s.turns
        assert ledger.lost() == 0 and ledger.repeated == 0 and ledger.resyncs == 0
        # In order: the ledger keeps arrival order, and seqs only go up.
        seqs = list(ledger.seqs)
        assert seqs == sorted(seqs)
        assert ledger.stuck() == 0
        assert not ledger.errors, ledger.errors
        assert {status for _, status, _ in ledger.outcomes} == {"completed"}
    print(f"peak RSS during the stalls (MiB): {peak}")  # shown with -s
    for name, mb in peak.items():
        assert mb < RSS_BOUND_MB, (name, mb)
