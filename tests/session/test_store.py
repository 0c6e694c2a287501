"""Session truth in a real Redis: admission, fenced writes, the journal, key layout."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

from antiphon.common.ids import new_id
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate.translator import Translator
from antiphon.session.state import keys
from antiphon.session.state.store import NotOwnerError, SessionStore
from tests.support.redis_dbs import db_url, flushed

DB = 5  # this module's own database on the shared test Redis


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    async with flushed(redis_url, DB) as client:
        yield client


@pytest.fixture
def store(redis_client: aioredis.Redis) -> SessionStore:
    return make_store(redis_client)


def make_store(client: aioredis.Redis, **overrides: Any) -> SessionStore:
    options: dict[str, Any] = {
        "lease_ms": 5000,
        "journal_max_bytes": 1 << 20,
        "journal_ttl_s": 60.0,
        "ops_cache_size": 4,
    }
    return SessionStore(client, **(options | overrides))


# ----------------------------------------------------------------- admission
async def test_admission_is_atomic_under_concurrency(redis_url: str) -> None:
    """20 racing admits for 5 slots, each on its own connection: exactly 5 win."""
    url = db_url(redis_url, DB)
    clients = [aioredis.from_url(url) for _ in range(20)]
    try:
        await clients[0].flushdb()
        stores = [make_store(c) for c in clients]
        results = await asyncio.gather(
            *(s.admit(f"sess_{i}", 5, f"own_{i}") for i, s in enumerate(stores))
        )
        assert sum(results) == 5
        assert await stores[0].admitted_count() == 5
        winners = {f"sess_{i}" for i, ok in enumerate(results) if ok}
        members = await clients[0].smembers(keys.ADMITTED)
        assert members == {w.encode() for w in winners}
    finally:
        for c in clients:
            await c.aclose()


async def test_readmitting_an_admitted_session_is_idempotent(store: SessionStore) -> None:
    assert await store.admit("sess_a", 1, "own_sess_a")
    assert await store.admit("sess_a", 1, "own_sess_a")  # already holds its slot
    assert await store.admitted_count() == 1
    assert not await store.admit("sess_b", 1, "own_sess_b")


async def test_a_new_slot_is_leased_to_its_opener_without_stealing_an_owner(
    store: SessionStore, redis_client: aioredis.Redis
) -> None:
    assert await store.admit("sess_a", 2, "own_a")
    assert await redis_client.get(keys.owner("sess_a")) == b"own_a"
    await redis_client.set(keys.owner("sess_b"), "own_old")
    assert await store.admit("sess_b", 2, "own_b")
    assert await redis_client.get(keys.owner("sess_b")) == b"own_old"


async def test_release_frees_a_slot(store: SessionStore) -> None:
    assert await store.admit("sess_a", 1, "own_sess_a")
    assert not await store.admit("sess_b", 1, "own_sess_b")
    await store.release("sess_a")
    assert await store.admitted_count() == 0
    assert await store.admit("sess_b", 1, "own_sess_b")
    await store.release("sess_unknown")  # harmless
    assert await store.admitted_count() == 1


# ------------------------------------------------------------------ journal
async def test_append_event_requires_the_next_seq(store: SessionStore) -> None:
    """A gap or a repeat means two writers: refused, and nothing is journaled."""
    await store.open("sess_j", "own_1", {"state": "open"})
    for seq in (1, 2, 3):
        await store.append_event("sess_j", "own_1", seq, f"e{seq}".encode())
    with pytest.raises(NotOwnerError):
        await store.append_event("sess_j", "own_1", 5, b"gap")
    with pytest.raises(NotOwnerError):
        await store.append_event("sess_j", "own_1", 3, b"repeat")
    with pytest.raises(NotOwnerError):
        await store.append_event("sess_j", "own_1", 0, b"zero")
    await store.append_event("sess_j", "own_1", 4, b"e4")
    journal = (await store.journal_since("sess_j", 0)).events
    assert journal == [(1, b"e1"), (2, b"e2"), (3, b"e3"), (4, b"e4")]
    assert (await store.fields("sess_j"))[b"seq"] == b"4"


async def test_first_event_of_a_session_is_seq_1(store: SessionStore) -> None:
    await store.open("sess_f", "own_1", {})
    with pytest.raises(NotOwnerError):
        await store.append_event("sess_f", "own_1", 2, b"x")
    await store.append_event("sess_f", "own_1", 1, b"x")


async def test_journal_since_returns_later_events_in_order(store: SessionStore) -> None:
    await store.open("sess_r", "own_1", {})
    for seq in range(1, 13):
        await store.append_event("sess_r", "own_1", seq, b"p%d" % seq)
    assert [s for s, _ in (await store.journal_since("sess_r", 0)).events] == list(range(1, 13))
    after = (await store.journal_since("sess_r", 9)).events
    assert after == [(10, b"p10"), (11, b"p11"), (12, b"p12")]
    # seq 10 vs 1: ordering is numeric, not lexicographic.
    assert next(s for s, _ in (await store.journal_since("sess_r", 1)).events) == 2
    assert (await store.journal_since("sess_r", 12)).events == []
    assert (await store.journal_since("sess_none", 0)).events == []


async def test_the_same_event_again_is_no_repeat(store: SessionStore) -> None:
    """A commit retried after its reply was lost (a connection cut mid-way)
    finds its events journaled already: accepted, journaled once."""
    await store.open("sess_a", "own_1", {"state": "open"})
    await store.commit("sess_a", "own_1", [(1, b"e1"), (2, b"e2")], {"epoch": "1"})
    await store.commit("sess_a", "own_1", [(1, b"e1"), (2, b"e2"), (3, b"e3")], {"epoch": "2"})
    journal = (await store.journal_since("sess_a", 0)).events
    assert journal == [(1, b"e1"), (2, b"e2"), (3, b"e3")]
    assert (await store.fields("sess_a"))[b"epoch"] == b"2"
    with pytest.raises(NotOwnerError):  # the same seq with other bytes: two writers
        await store.commit("sess_a", "own_1", [(3, b"other")])


# ------------------------------------------------------------------ fencing
async def test_a_lapsed_lease_nobody_took_is_taken_back_by_the_owners_next_write(
    store: SessionStore, redis_client: aioredis.Redis
) -> None:
    """Redis paused past the lease: the owner is still the owner."""
    await store.open("sess_l", "own_1", {"state": "open"})
    await redis_client.delete(keys.owner("sess_l"))
    await store.append_event("sess_l", "own_1", 1, b"e1")
    assert await redis_client.get(keys.owner("sess_l")) == b"own_1"
    assert 0 < await redis_client.pttl(keys.owner("sess_l")) <= store.lease_ms
    # Not once the session ended (a reaper closed it): then nobody writes.
    await store.expire("sess_l", 60)
    with pytest.raises(NotOwnerError):
        await store.set_fields("sess_l", "own_1", {"x": "1"})
    assert await redis_client.get(keys.owner("sess_l")) is None


async def test_a_new_owner_fences_out_the_old_owners_writes(store: SessionStore) -> None:
    await store.open("sess_o", "own_old", {"state": "open"})
    await store.append_event("sess_o", "own_old", 1, b"old")
    await store.open("sess_o", "own_new", {"state": "open"})
    with pytest.raises(NotOwnerError):
        await store.append_event("sess_o", "own_old", 1, b"stale")
    with pytest.raises(NotOwnerError):
        await store.set_fields("sess_o", "own_old", {"state": "closing"})
    with pytest.raises(NotOwnerError):
        await store.append_history("sess_o", "own_old", b"stale item")
    # The successor's writes go through, and nothing of the stale ones landed.
    await store.append_event("sess_o", "own_new", 1, b"new")
    await store.set_fields("sess_o", "own_new", {"state": "active"})
    assert await store.append_history("sess_o", "own_new", b"item") == 1
    assert (await store.journal_since("sess_o", 0)).events == [(1, b"new")]
    assert (await store.fields("sess_o"))[b"state"] == b"active"
    assert await store.history("sess_o") == [b"item"]


async def test_writes_without_ownership_are_refused(store: SessionStore) -> None:
    with pytest.raises(NotOwnerError):
        await store.append_event("sess_never", "own_x", 1, b"x")
    with pytest.raises(NotOwnerError):
        await store.set_fields("sess_never", "own_x", {"a": "b"})
    assert await store.fields("sess_never") == {}


async def test_expire_ends_ownership_and_schedules_deletion(
    store: SessionStore, redis_client: aioredis.Redis
) -> None:
    await store.open("sess_e", "own_1", {})
    await store.append_event("sess_e", "own_1", 1, b"x")
    await store.append_history("sess_e", "own_1", b"h")
    await store.expire("sess_e", 30.0)
    with pytest.raises(NotOwnerError):
        await store.append_event("sess_e", "own_1", 2, b"late")
    for key in (keys.session("sess_e"), keys.journal("sess_e"), keys.history("sess_e")):
        assert 0 < await redis_client.pttl(key) <= 30_000
    # Late readers still see the journal until it expires.
    assert (await store.journal_since("sess_e", 0)).events == [(1, b"x")]


# --------------------------------------------------------------- incarnation
async def test_reopening_an_id_bumps_incarnation_and_drops_journal_and_history(
    store: SessionStore,
) -> None:
    first = await store.open("sess_i", "own_1", {"config": b"\x01\x02", "state": "open"})
    assert first.incarnation == 0
    await store.append_event("sess_i", "own_1", 1, b"a")
    await store.append_event("sess_i", "own_1", 2, b"b")
    await store.append_history("sess_i", "own_1", b"turn 1")
    second = await store.open("sess_i", "own_2", {"state": "open"})
    assert second.incarnation == 1
    assert (await store.journal_since("sess_i", 0)).events == []
    assert await store.history("sess_i") == []
    fields = await store.fields("sess_i")
    assert (fields[b"incarnation"], fields[b"seq"]) == (b"1", b"0")
    # seq restarts for the new incarnation.
    await store.append_event("sess_i", "own_2", 1, b"c")
    assert (await store.open("sess_i", "own_3", {})).incarnation == 2


async def test_open_stores_the_given_fields(store: SessionStore) -> None:
    await store.open("sess_h", "own_1", {"config": b"\x00\xff", "state": "open"})
    fields = await store.fields("sess_h")
    assert fields[b"config"] == b"\x00\xff"
    assert fields[b"state"] == b"open"
    assert (fields[b"epoch"], fields[b"turn_id"], fields[b"incarnation"]) == (b"0", b"0", b"0")


async def test_history_keeps_append_order(store: SessionStore) -> None:
    await store.open("sess_l", "own_1", {})
    for i in range(5):
        assert await store.append_history("sess_l", "own_1", b"%d" % i) == i + 1
    assert await store.history("sess_l") == [b"0", b"1", b"2", b"3", b"4"]


# -------------------------------------------------------------- key layout
def _hash_tag(key: str) -> str | None:
    """Redis Cluster's hash tag: the text between the first `{` and the next `}`, if non-empty."""
    m = re.search(r"\{([^}]*)\}", key)
    return m.group(1) if m and m.group(1) else None


SESSION_KEYS = (keys.session, keys.owner, keys.journal, keys.history)


@pytest.mark.parametrize(
    "session_id", [new_id("sess"), "sess_demo_01", "user-42", "a.b:c", "a}b", "x{y"]
)
def test_every_key_of_one_session_shares_one_hash_tag(session_id: str) -> None:
    names = [f(session_id) for f in SESSION_KEYS]
    assert len(set(names)) == len(names)
    tags = {_hash_tag(k) for k in names}
    assert len(tags) == 1 and None not in tags
    assert len({key_slot(k.encode()) for k in names}) == 1


def test_different_sessions_get_different_tags() -> None:
    a, b = new_id("sess"), new_id("sess")
    assert _hash_tag(keys.session(a)) != _hash_tag(keys.session(b))


@pytest.mark.parametrize("session_id", ["", "}abc"])
def test_a_client_chosen_session_id_is_refused_or_maps_to_one_slot(session_id: str) -> None:
    """Either the gateway refuses the id at open, or every key of the session shares one slot."""
    try:
        Translator().open({"type": "session.update", "session": {"session_id": session_id}}, {})
    except ClientError:
        return
    names = [f(session_id) for f in SESSION_KEYS]
    assert None not in {_hash_tag(k) for k in names}
    assert len({key_slot(k.encode()) for k in names}) == 1


# -------------------------------------------------------- leases, takeover
async def test_take_over_fences_out_the_live_owner_and_lease_renewal_reports_it(
    store: SessionStore,
) -> None:
    await store.open("sess_t", "own_a", {"state": "open"})
    assert await store.refresh_lease("sess_t", "own_a")
    assert await store.take_over("sess_t", "own_b")
    assert not await store.refresh_lease("sess_t", "own_a")
    with pytest.raises(NotOwnerError):
        await store.append_event("sess_t", "own_a", 1, b"stale")
    await store.append_event("sess_t", "own_b", 1, b"fresh")
    assert (await store.journal_since("sess_t", 0)).events == [(1, b"fresh")]


async def test_a_closed_session_cannot_be_taken_over(store: SessionStore) -> None:
    await store.open("sess_c", "own_a", {"state": "open"})
    await store.expire("sess_c", 30.0)
    assert not await store.take_over("sess_c", "own_b")
    assert not await store.take_over("sess_missing", "own_b")


async def test_an_orphan_is_claimed_only_once_its_lease_lapsed(
    redis_client: aioredis.Redis,
) -> None:
    store = make_store(redis_client, lease_ms=100)
    await store.open("sess_l", "own_a", {"state": "open"})
    assert not await store.claim_orphan("sess_l", "reaper")
    await asyncio.sleep(0.25)
    assert not await store.owner_alive("sess_l")
    assert await store.claim_orphan("sess_l", "reaper")


# ------------------------------------------------------------ journal bounds
async def test_acked_events_leave_the_journal_and_a_resume_before_them_is_a_gap(
    store: SessionStore,
) -> None:
    await store.open("sess_a", "own", {})
    for seq in range(1, 6):
        await store.append_event("sess_a", "own", seq, b"x" * 10)
    assert await store.trim_acked("sess_a", "own", 3) == 3
    after = await store.journal_since("sess_a", 3)
    assert (after.missing, [s for s, _ in after.events]) == ("", [4, 5])
    assert (await store.journal_since("sess_a", 1)).missing == "journal_gap"
    assert (await store.fields("sess_a"))[b"journal_bytes"] == b"20"


async def test_the_journal_keeps_to_its_byte_budget_and_reports_overflow(
    redis_client: aioredis.Redis,
) -> None:
    store = make_store(redis_client, journal_max_bytes=250)
    await store.open("sess_b", "own", {})
    for seq in range(1, 11):
        await store.append_event("sess_b", "own", seq, b"y" * 100)
    fields = await store.fields("sess_b")
    assert int(fields[b"journal_bytes"]) <= 250
    kept = await store.journal_since("sess_b", 8)
    assert [s for s, _ in kept.events] == [9, 10]
    assert (await store.journal_since("sess_b", 0)).missing == "journal_overflow"


async def test_an_operation_id_is_recorded_once_within_the_cache(store: SessionStore) -> None:
    await store.open("sess_op", "own", {})
    assert await store.record_operation("sess_op", "own", "op-1")
    assert not await store.record_operation("sess_op", "own", "op-1")
    for i in range(2, 7):  # the cache holds 4: op-1 falls out
        assert await store.record_operation("sess_op", "own", f"op-{i}")
    assert await store.record_operation("sess_op", "own", "op-1")


async def test_a_lapsed_lease_with_no_successor_is_taken_back_by_its_owner(
    redis_client: aioredis.Redis,
) -> None:
    store = make_store(redis_client, lease_ms=100)
    await store.open("sess_lapse", "own_a", {"state": "open"})
    await asyncio.sleep(0.25)  # e.g. Redis was down longer than the lease
    assert await store.refresh_lease("sess_lapse", "own_a")
    await store.append_event("sess_lapse", "own_a", 1, b"still mine")
    # A successor's token, once set, is never taken back.
    assert await store.take_over("sess_lapse", "own_b")
    assert not await store.refresh_lease("sess_lapse", "own_a")


async def test_leases_renew_in_one_batch_and_report_each_loss(store: SessionStore) -> None:
    for n in range(3):
        await store.open(f"sess_batch_{n}", f"own_{n}", {"state": "open"})
    assert await store.take_over("sess_batch_1", "own_other")
    renewed = await store.refresh_leases([(f"sess_batch_{n}", f"own_{n}") for n in range(3)])
    assert renewed == [True, False, True]
