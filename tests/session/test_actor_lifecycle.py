"""The session actor's life, one piece of mail at a time: open, commands
from a replaced stream, detach and resume, grace expiry, close, expiry by
age, takeover of an open response, and standing down. Real parts over a
real Redis; the stage workers are recordings."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from antiphon.session.actor import mail
from antiphon.session.actor.errors import Rejection
from antiphon.session.state.snapshot import Snapshot
from antiphon.v1 import session_pb2 as spb
from tests.session.harness import MANUAL, SID, Session, session

DB = 8  # this module's own database on the shared test Redis


async def resume(s: Session, token: str, cursor: int) -> None:
    answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    request = spb.ResumeSession(
        session_id=SID,
        incarnation=s.actor.snapshot().incarnation,
        resume_token=token,
        last_received_seq=cursor,
    )
    await s.actor.handle(mail.Resume(request, answer))
    s.outbound, s.generation = answer.result()


async def test_open_announces_the_session_with_its_token_and_opens_it_on_both_workers(
    redis_url: str,
) -> None:
    async with session(redis_url, DB) as s:
        await s.attach()
        created, updated = s.events()
        assert created.session_created.resume_token.startswith("rt_")
        assert updated.session_updated.resume_token == ""  # said once
        assert [e.seq for e in (created, updated)] == [1, 2]
        assert len(s.sent0("open")) == len(s.sent1("open")) == 1
        fields = await s.store.fields(SID)
        assert fields[b"attachment"] == b"1" and fields[b"token_hash"]


async def test_a_command_from_a_replaced_stream_is_never_applied(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        old = s.generation
        await s.attach()  # a second stream takes the client side over
        s.events()
        stale = spb.ClientCommand(append_text=spb.AppendText(text="late"))
        await s.actor.handle(mail.Command(old, stale))
        await s.command(commit=spb.CommitInput())
        # The text never joined: the commit found nothing to seal.
        (error,) = [e.error for e in s.events() if e.HasField("error")]
        assert error.code == "input_audio_buffer_empty"
        assert s.count("antiphon_session_stale_dropped_total", source="attachment") == 1


async def test_a_detached_session_gives_its_worker_slots_back_and_a_resume_replays(
    redis_url: str,
) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        token = s.events()[0].session_created.resume_token
        await s.command(create_response=spb.CreateResponse())
        cursor = s.events()[-1].seq
        first0, first1 = s.workers.now("stage0"), s.workers.now("stage1")
        await s.actor.handle(mail.Detached(s.generation))
        assert first0.closed and first1.closed  # capacity follows the sockets
        assert s.actor.snapshot().active_response is None
        with pytest.raises(Rejection) as refused:
            await resume(s, "rt_wrong", cursor)
        assert refused.value.code == "session_resume_refused"
        await resume(s, token, cursor)
        # Bound again, on fresh workers, each opened there.
        assert [len(s.workers.bound[st]) for st in ("stage0", "stage1")] == [2, 2]
        assert [r.WhichOneof("kind") for r in s.workers.now("stage0").sent] == ["open"]
        events = s.events()
        assert events[0].HasField("session_resumed") and events[0].seq == cursor
        # What the client missed: the cancelled response's end.
        done = [e.response_done.response for e in events if e.HasField("response_done")]
        assert [(r.status, r.status_reason) for r in done] == [("cancelled", "client_disconnected")]


async def test_nobody_back_within_the_grace_period_expires_the_session(redis_url: str) -> None:
    async with session(redis_url, DB) as s:
        await s.attach()
        generation = s.generation
        await s.actor.handle(mail.Detached(generation))
        await s.actor.handle(mail.GraceExpired(generation - 1))  # an older stream's timer
        assert not s.actor.closed
        await s.actor.handle(mail.GraceExpired(generation))
        assert s.actor.closed
        fields = await s.store.fields(SID)
        assert fields[b"state"] == b"closed"
        assert SID not in await s.store.admitted()
        journal = await s.store.journal_since(SID, 0)
        last = spb.ServerEvent.FromString(journal.events[-1][1])
        assert last.session_expired.reason == "disconnect_grace_expired"


async def test_close_ends_the_session_and_releases_what_it_holds(redis_url: str) -> None:
    async with session(redis_url, DB) as s:
        await s.attach()
        s.events()
        await s.command(close=spb.CloseSession())
        assert s.kinds() == ["session_closed"]
        assert s.actor.closed and s.workers.now("stage0").closed
        assert SID not in await s.store.admitted()


async def test_a_dropped_socket_only_detaches_the_session(redis_url: str) -> None:
    async with session(redis_url, DB) as s:
        await s.attach()
        s.events()
        await s.command(client_gone=spb.ClientGone(clean=False, close_code=1006))
        assert not s.actor.closed and s.workers.now("stage1").closed
        assert s.count("antiphon_session_detached_total", how="dropped") == 1


async def test_a_session_past_its_maximum_age_expires_at_the_next_tick(redis_url: str) -> None:
    def opened_long_ago(snap: Snapshot) -> None:
        snap.created_ms = int(time.time() * 1000) - 10_000

    async with session(redis_url, DB, snapshot=opened_long_ago, max_session_duration_s=5) as s:
        await s.attach()
        s.events()
        await s.actor.handle(mail.Tick())
        assert s.kinds() == ["session_expired"] and s.actor.closed


async def test_a_response_the_old_owner_left_open_ends_failed_on_takeover(
    redis_url: str,
) -> None:
    def left_open(snap: Snapshot) -> None:
        snap.active_response = spb.Response(id="resp_old", status="in_progress")

    async with session(redis_url, DB, snapshot=left_open) as s:
        await s.actor.handle(mail.Recover())
        journal = await s.store.journal_since(SID, 0)
        done = spb.ServerEvent.FromString(journal.events[0][1]).response_done.response
        assert (done.id, done.status, done.status_reason) == (
            "resp_old",
            "failed",
            "session_owner_changed",
        )
        assert len(s.sent0("open")) == 1  # bound again on its workers


async def test_a_replica_that_lost_the_session_stands_down_without_writing(
    redis_url: str,
) -> None:
    async with session(redis_url, DB) as s:
        await s.attach()
        s.events()
        await s.actor.handle(mail.OwnershipLost())
        assert s.actor.closed
        replaced, *rest = s.events()
        assert replaced.HasField("session_replaced") and rest == []
        assert s.outbound is None  # ended: its gateway resumes elsewhere
        assert (await s.store.journal_since(SID, 0)).events[-1][0] == replaced.seq
