"""The emitter and the replay: typed event kinds, the journal's format in a real
Redis, and what a resuming stream is given first."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from antiphon.session.actor.attachment import Attachment, Outbound
from antiphon.session.actor.event_kinds import server_event
from antiphon.session.actor.journal import Emitter, replay
from antiphon.session.metrics import SessionMetrics
from antiphon.session.state import keys
from antiphon.session.state.store import Journal, NotOwnerError, SessionStore
from antiphon.v1 import session_pb2 as spb
from tests.support.redis_dbs import flushed

DB = 4  # this module's own database on the shared test Redis
SID = "sess_journal"


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    async with flushed(redis_url, DB) as client:
        yield client


@pytest.fixture
def store(client: aioredis.Redis) -> SessionStore:
    return SessionStore(
        client, lease_ms=5000, journal_max_bytes=1 << 20, journal_ttl_s=60, ops_cache_size=4
    )


async def opened(store: SessionStore) -> str:
    """Open SID in `store`; its owner token."""
    await store.open(SID, "own_1", {"state": "open"})
    return "own_1"


def emitter_on(
    store: SessionStore, token: str, *, seq: int = 0
) -> tuple[Emitter, Outbound, SessionMetrics, list[bool]]:
    attachment, stood_down = Attachment(SID, 0), []
    outbound, _, _ = attachment.attach(seq=seq)
    metrics = SessionMetrics(CollectorRegistry())
    emitter = Emitter(
        journal=store,
        session_id=SID,
        owner_token=token,
        seq=seq,
        attachment=attachment,
        metrics=metrics,
        on_not_owner=lambda: stood_down.append(True),
    )
    return emitter, outbound, metrics, stood_down


def sent(outbound: Outbound) -> list[spb.ServerEvent]:
    events = []
    while not outbound.empty():
        ev = outbound.get_nowait()
        assert ev is not None
        events.append(ev)
    return events


# ----------------------------------------------------------------- kinds
def test_a_kind_carries_only_the_message_type_the_descriptor_gives_it() -> None:
    ev = server_event(7, "item_done", spb.ItemEvent(previous_item_id="item_1"))
    assert ev.seq == 7 and ev.WhichOneof("kind") == "item_done" and ev.event_id
    assert ev.item_done.previous_item_id == "item_1"
    with pytest.raises(TypeError, match=r"item_done does not carry antiphon\.v1\.SessionClosed"):
        server_event(7, "item_done", spb.SessionClosed())


# --------------------------------------------------------------- emitter
async def test_what_is_sent_is_what_the_journal_holds_byte_for_byte(
    store: SessionStore, client: aioredis.Redis
) -> None:
    emitter, outbound, metrics, _ = emitter_on(store, await opened(store))
    await emitter.emit("heartbeat_ack", spb.HeartbeatAck(session_id=SID))
    await emitter.emit_all([("input_cleared", spb.InputCleared())])
    assert sent(outbound) == [] and (await store.journal_since(SID, 0)).events == []
    await emitter.flush()
    out = sent(outbound)
    assert [e.seq for e in out] == [1, 2] and emitter.seq == 2
    journal = await store.journal_since(SID, 0)
    assert journal.missing == ""
    assert journal.events == [(e.seq, e.SerializeToString()) for e in out]
    # The journal's key and stream ids are the ones a resume reads.
    entries: list[tuple[bytes, object]] = await client.xrange(keys.journal(SID))  # type: ignore[assignment]
    assert [eid for eid, _ in entries] == [b"1-0", b"2-0"]
    assert metrics.events.labels("heartbeat_ack")._value.get() == 1


async def test_a_mistyped_event_is_refused_before_the_journal(store: SessionStore) -> None:
    emitter, outbound, _, _ = emitter_on(store, await opened(store))
    with pytest.raises(TypeError):
        await emitter.emit_all(
            [("heartbeat_ack", spb.HeartbeatAck()), ("input_cleared", spb.HeartbeatAck())]
        )
    await emitter.flush()
    # The first of the batch went out; nothing after it reached Redis or the stream.
    assert [e.seq for e in sent(outbound)] == [1] and emitter.seq == 1
    assert [seq for seq, _ in (await store.journal_since(SID, 0)).events] == [1]


async def test_a_write_fenced_out_by_a_new_owner_is_never_sent(store: SessionStore) -> None:
    emitter, outbound, _, stood_down = emitter_on(store, await opened(store))
    await emitter.emit("input_cleared", spb.InputCleared())
    await emitter.flush()
    assert await store.take_over(SID, "own_2")
    await emitter.emit("input_cleared", spb.InputCleared())
    with pytest.raises(NotOwnerError):
        await emitter.flush()
    assert stood_down == [True] and emitter.journaled_seq == 1
    assert [e.seq for e in sent(outbound)] == [1]
    assert len((await store.journal_since(SID, 0)).events) == 1


async def test_an_error_is_counted_by_code_and_journaled(store: SessionStore) -> None:
    emitter, outbound, metrics, _ = emitter_on(store, await opened(store))
    await emitter.error(spb.ErrorEvent(type="invalid_request_error", code="invalid_value"))
    await emitter.flush()
    (ev,) = sent(outbound)
    assert ev.error.code == "invalid_value"
    assert metrics.errors.labels("invalid_value")._value.get() == 1


# ---------------------------------------------------------------- replay
def test_replay_gives_the_resume_at_the_cursor_then_the_events_after_it() -> None:
    outbound: Outbound = Outbound()
    after = [server_event(s, "input_cleared", spb.InputCleared()) for s in (6, 7)]
    resumed = spb.SessionResumed(session_id=SID, incarnation=2)
    journal = Journal([(e.seq, e.SerializeToString()) for e in after], "")
    assert replay(outbound, resumed, 5, journal)
    first, *rest = sent(outbound)
    assert first.seq == 5 and first.session_resumed == resumed
    assert rest == after


def test_replay_of_a_journal_with_a_hole_asks_for_a_resync_and_ends() -> None:
    outbound: Outbound = Outbound()
    resumed = spb.SessionResumed(session_id=SID)
    assert not replay(outbound, resumed, 5, Journal([], "journal_overflow"))
    first, second = sent(outbound)
    assert first.WhichOneof("kind") == "session_resumed"
    assert second.seq == 5 and second.resync_required.reason == "journal_overflow"
    assert second.resync_required.session_id == SID
