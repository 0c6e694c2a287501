"""A Redis that does not answer, on a Redis of this module's own, paused with
SIGSTOP as an AOF rewrite stall or a fail-over pauses one: an owner's call
waits it out, up to the outage bound; past it the session is given up with a
typed word to its client, never silently."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from stack import free_port, start_redis

from antiphon.session.state import keys
from antiphon.session.state.store import SessionStore, StoreUnavailable
from antiphon.v1 import session_pb2 as spb
from tests.session.harness import SID, session


@pytest.fixture(scope="module")
def own_redis() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    proc = start_redis(port, Path(tempfile.mkdtemp(prefix="antiphon-outage-")))
    try:
        yield proc, f"redis://127.0.0.1:{port}/0"
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def stopped(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


@pytest.fixture
async def store_on(
    own_redis: tuple[subprocess.Popen[bytes], str],
) -> AsyncIterator[tuple[subprocess.Popen[bytes], aioredis.Redis]]:
    proc, url = own_redis
    client = aioredis.from_url(url)
    await client.flushdb()
    try:
        yield proc, client
    finally:
        await client.aclose()


def make_store(client: aioredis.Redis, outage_s: float) -> SessionStore:
    return SessionStore(
        client,
        lease_ms=1000,
        journal_max_bytes=1 << 20,
        journal_ttl_s=60,
        ops_cache_size=4,
        outage_s=outage_s,
    )


async def test_a_write_waits_out_a_paused_redis_and_takes_its_lapsed_lease_back(
    store_on: tuple[subprocess.Popen[bytes], aioredis.Redis],
) -> None:
    proc, client = store_on
    store = make_store(client, outage_s=10)
    await store.open("sess_p", "own_1", {"state": "open"})
    with stopped(proc):
        write = asyncio.create_task(store.commit("sess_p", "own_1", [(1, b"e1")], {"x": "1"}))
        # Longer than the 1 s lease: it lapses while Redis is paused.
        await asyncio.sleep(1.5)
        assert not write.done()
    await asyncio.wait_for(write, 5)
    assert await client.get(keys.owner("sess_p")) == b"own_1"
    assert [seq for seq, _ in (await store.journal_since("sess_p", 0)).events] == [1]


async def test_past_the_outage_bound_an_owners_call_raises_store_unavailable(
    store_on: tuple[subprocess.Popen[bytes], aioredis.Redis],
) -> None:
    proc, client = store_on
    store = make_store(client, outage_s=0.5)
    await store.open("sess_q", "own_1", {"state": "open"})
    with stopped(proc):
        t0 = time.monotonic()
        with pytest.raises(StoreUnavailable):
            await store.set_fields("sess_q", "own_1", {"x": "1"})
        assert 0.5 <= time.monotonic() - t0 < 2


async def test_a_session_redis_leaves_too_long_is_given_up_with_a_resync_required(
    own_redis: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, url = own_redis
    async with session(url, 0, store_outage_max_s=0.5) as s:
        await s.attach()
        s.kinds()
        with stopped(proc):
            await s.command(heartbeat=spb.Heartbeat())
        events = s.events()
        # Nothing unjournaled was sent: only the word to start over, then the end.
        assert [e.WhichOneof("kind") for e in events] == ["resync_required"]
        assert events[0].resync_required.reason == "session_store_unavailable"
        assert events[0].resync_required.session_id == SID
        assert s.outbound is None and s.actor.closed
        assert s.count("antiphon_session_store_unavailable_total") == 1
