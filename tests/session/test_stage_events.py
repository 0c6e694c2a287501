"""Stage events: every kind a stage worker may send has a handler, stale
results are dropped, and a worker's death ends what it owed and moves the
session to another worker. A real actor over a real Redis; the workers are
recordings."""

from __future__ import annotations

from typing import Any, cast

import pytest

from antiphon.session.actor import mail
from antiphon.session.stage.oneof_routes import Routes
from antiphon.session.stage.stage_events import GENERATION_EVENTS, SPEECH_EVENTS
from antiphon.session.stage.stages import Binding, StageResult
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.session.harness import MANUAL, Session, Workers, session
from tests.support.bindings import Recording

DB = 15  # this module's own database on the shared test Redis


def oneof_kinds(event: Any) -> list[str]:
    return [f.name for f in event.DESCRIPTOR.oneofs_by_name["kind"].fields]


# -------------------------------------------------------------- the table
async def test_every_kind_a_stage_worker_may_send_has_a_handler(redis_url: str) -> None:
    async with session(redis_url, DB) as s:
        events = s.actor._stage_events
        assert oneof_kinds(stage_pb2.Stage0Event) and events.stage0.unrouted() == []
        assert oneof_kinds(stage_pb2.Stage1Event) and events.stage1.unrouted() == []


def test_a_kind_without_a_handler_is_named_and_a_wrong_type_is_refused() -> None:
    async def nothing(msg: stage_pb2.AudioChunk) -> None:
        pass

    routes = Routes(stage_pb2.Stage1Event).route(stage_pb2.AudioChunk, nothing)
    assert routes.unrouted() == ["done", "error"]
    with pytest.raises(ValueError):
        routes.route(stage_pb2.Transcript, cast(Any, nothing))


def test_every_speech_event_is_fenced_by_the_epoch() -> None:
    carried = {
        f.message_type.full_name
        for f in stage_pb2.Stage1Event.DESCRIPTOR.oneofs_by_name["kind"].fields
        if f.message_type is not None
    }
    assert carried == {t.DESCRIPTOR.full_name for t in SPEECH_EVENTS}
    for fenced in (*SPEECH_EVENTS, *GENERATION_EVENTS):
        assert "epoch" in fenced.DESCRIPTOR.fields_by_name


# ------------------------------------------------------------ staleness
async def started(s: Session) -> str:
    """A response asked of stage0: its id."""
    await s.attach()
    await s.command(create_response=spb.CreateResponse())
    s.events()
    (generate,) = s.sent0("generate")
    return str(generate.response_id)


async def test_generation_of_an_earlier_epoch_is_dropped_what_was_heard_is_not(
    redis_url: str,
) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        rid = await started(s)
        await s.command(cancel_response=spb.CancelResponse(response_id=rid))
        s.events()
        await s.stage0(delta=stage_pb2.GenerationDelta(epoch=0, response_id=rid, text="late"))
        assert s.events() == []
        assert s.count("antiphon_session_stale_dropped_total", source="stage0") == 1
        # Speech stage0 heard before the cancel is still the user's.
        await s.stage0(speech_started=stage_pb2.VadSpeechStarted(epoch=0, audio_start_ms=5))
        await s.stage1(audio=stage_pb2.AudioChunk(epoch=0, response_id=rid))
        assert s.count("antiphon_session_stale_dropped_total", source="stage1") == 1


async def test_results_of_a_binding_the_session_let_go_are_for_nobody(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        rid = await started(s)
        gone = cast(Binding[Any], Recording("stage0:old"))
        delta = stage_pb2.Stage0Event(
            delta=stage_pb2.GenerationDelta(epoch=0, response_id=rid, text="hi")
        )
        await s.actor.handle(mail.StageNews("stage0", StageResult(gone, delta)))
        assert s.events() == []
        assert s.count("antiphon_session_stale_dropped_total", source="stage0") == 1


async def test_a_stage_error_fails_the_response_it_names(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        rid = await started(s)
        await s.stage0(
            error=stage_pb2.StageError(epoch=0, response_id=rid, code="llm_error", message="x")
        )
        events = s.events()
        assert events[0].error.code == "llm_error"
        (done,) = [e.response_done.response for e in events if e.HasField("response_done")]
        assert (done.status, done.status_reason) == ("failed", "llm_error")


# -------------------------------------------------------------- fail-over
async def test_a_dead_stage0_ends_its_owed_turns_and_response_and_moves_on(
    redis_url: str,
) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        await s.command(append_audio=spb.AppendAudio(pcm16=b"\x10\x00" * 4800))
        await s.command(commit=spb.CommitInput())
        await s.command(create_response=spb.CreateResponse())
        s.events()
        assert s.sent0("generate") == []  # waiting for the turn's transcript
        dead = s.workers.now("stage0")
        await s.lose("stage0")
        (done,) = [e.response_done.response for e in s.events() if e.HasField("response_done")]
        assert done.status_reason == "stage0_unavailable"
        replacement = s.workers.now("stage0")
        assert replacement is not dead
        assert [r.WhichOneof("kind") for r in replacement.sent] == ["open"]
        # The turn it owed is over: the next response is asked for at once.
        await s.command(create_response=spb.CreateResponse())
        assert len(s.sent0("generate")) == 1
        assert s.count("antiphon_session_stage_failovers_total", stage="stage0") == 1


async def test_a_stage_no_worker_takes_is_retried_at_each_tick(redis_url: str) -> None:
    workers = Workers(refuse={"stage1"})
    async with session(redis_url, DB, workers=workers) as s:
        await s.attach()
        s.events()
        await s.lose("stage1")
        (error,) = [e.error for e in s.events() if e.HasField("error")]
        assert error.code == "stage_unavailable"
        assert len(workers.bound["stage1"]) == 1
        await s.actor.handle(mail.Tick())
        # Still none: tried again, and the client is not told again.
        assert [e for e in s.events() if e.HasField("error")] == []
        workers.refuse.clear()
        await s.actor.handle(mail.Tick())
        assert len(workers.bound["stage1"]) == 2
        assert s.workers.now("stage1").sent[0].WhichOneof("kind") == "open"
        await s.actor.handle(mail.Tick())
        assert len(workers.bound["stage1"]) == 2  # bound: nothing to retry


async def test_a_worker_lost_while_detached_is_given_back_not_replaced(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        await s.command(append_audio=spb.AppendAudio(pcm16=b"\x10\x00" * 4800))
        await s.command(commit=spb.CommitInput())
        await s.actor.handle(mail.Detached(s.generation))
        # Stage0 is kept for the transcript it owes...
        owing = s.workers.now("stage0")
        assert not owing.closed and s.workers.now("stage1").closed
        (commit,) = s.sent0("commit")
        await s.stage0(transcript=stage_pb2.Transcript(item_id=commit.item_id, text="bye"))
        # ...and given back once it is heard.
        assert owing.closed and len(s.workers.bound["stage0"]) == 1
        assert [i.content[0].transcript for i in await s.history()] == ["bye"]


async def test_a_model_native_worker_lost_tells_the_client_its_context_is_new(
    redis_url: str,
) -> None:
    native = stage_pb2.StageInfo(capabilities=cpb.Capabilities(model_native=True))
    async with session(redis_url, DB, workers=Workers(info0=native)) as s:
        await s.attach()
        s.events()
        await s.lose("stage0")
        assert [e.error.code for e in s.events() if e.HasField("error")] == ["model_context_reset"]


async def test_a_model_native_session_with_no_worker_left_is_reset_once_one_takes_it(
    redis_url: str,
) -> None:
    """No `model_context_reset` while no worker has the session: only once one does."""
    native = stage_pb2.StageInfo(capabilities=cpb.Capabilities(model_native=True))
    workers = Workers(info0=native, refuse={"stage0"})
    async with session(redis_url, DB, workers=workers) as s:
        await s.attach()
        s.events()
        await s.lose("stage0")
        assert [e.error.code for e in s.events() if e.HasField("error")] == ["stage_unavailable"]
        workers.refuse.clear()
        await s.actor.handle(mail.Tick())
        assert [e.error.code for e in s.events() if e.HasField("error")] == ["model_context_reset"]
