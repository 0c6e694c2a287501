"""A GPT-Live delegation's answers, and text into the running model's context,
in the session's parts alone: recording stage bindings, a real Redis.

The delegate (assistant/delegate.py) binds a worker for each answer, opens
its own manual-lane session there, asks with the history and the
delegation's tools, tells the answer as a text response, places its
message and calls in the history, and hands its words to the voice model
(model_context.py), which is told with `ContextTaken` when it took them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from antiphon.session.actor.errors import Rejection
from antiphon.session.assistant.delegate import Delegate
from antiphon.session.assistant.model_context import ModelContext
from antiphon.session.config import session_config
from antiphon.session.config.current_config import CurrentConfig
from antiphon.session.conversation.conversation import Conversation
from antiphon.session.metrics import SessionMetrics
from antiphon.session.stage.stage_links import StageLinks
from antiphon.session.stage.stages import Binding, NoWorkerError, StageResult, StreamEnded
from antiphon.session.state.store import SessionStore
from antiphon.session.user.turns import Turns
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.session.test_model_speech import Journal
from tests.support.bindings import Recording, recording_links
from tests.support.parts import attached_emitter
from tests.support.redis_dbs import flushed

DB = 22  # this module's own database on the shared test Redis
SID, TOKEN = "sess_d", "own_d"
WEATHER = cpb.Tool(name="get_weather", parameters=json.dumps({"type": "object"}))


@dataclass
class Parts:
    delegate: Delegate
    context: ModelContext
    links: StageLinks
    stage0: Recording
    workers: list[Recording]
    journal: Journal
    conversation: Conversation


def moshi(*, takes_text: bool = True) -> stage_pb2.StageInfo:
    """What a `moshi` stage0 worker says of itself."""
    caps = cpb.Capabilities(
        implementation_level="model_native_duplex",
        model_native=True,
        supports_context_text=takes_text,
    )
    return stage_pb2.StageInfo(capabilities=caps)


@pytest.fixture
async def parts(redis_url: str) -> AsyncIterator[Parts]:
    async with flushed(redis_url, DB) as client:
        store = SessionStore(
            client, lease_ms=5000, journal_max_bytes=1 << 20, journal_ttl_s=60.0, ops_cache_size=4
        )
        await store.open(SID, TOKEN, {"state": "open"})
        workers: list[Recording] = []

        async def rebind(stage: str, failed: str) -> tuple[Binding[Any], stage_pb2.StageInfo]:
            assert stage == "delegate"
            workers.append(Recording(f"llm:{len(workers)}"))
            return cast(Binding[Any], workers[-1]), stage_pb2.StageInfo()

        links, stage0, _ = recording_links(SID, rebind=rebind)
        links._info["stage0"] = moshi()
        metrics = SessionMetrics(CollectorRegistry())
        journal = Journal()
        emitter = attached_emitter(SID, TOKEN, journal, metrics)
        conversation = Conversation(store, SID, TOKEN)
        context = ModelContext(links=links, emitter=emitter)
        delegate = Delegate(
            config=CurrentConfig(SID, session_config.defaults(), max_output_tokens=64),
            emitter=emitter,
            links=links,
            turns=Turns(SID),
            conversation=conversation,
            context=context,
            rebind=rebind,
            metrics=metrics,
        )
        yield Parts(delegate, context, links, stage0, workers, journal, conversation)


def asked(tools: list[cpb.Tool] | None = None) -> spb.CreateResponse:
    req = spb.CreateResponse(delegated=True, output_modalities=["text"], instructions="Be brief.")
    if tools:
        req.tools.extend(tools)
        req.has_tools = True
    return req


def said(worker: Recording, **event: Any) -> StageResult:
    return StageResult(cast(Binding[Any], worker), stage_pb2.Stage0Event(**event))


def contexts(stage0: Recording) -> list[stage_pb2.Stage0Context]:
    return [r.context for r in stage0.sent if r.WhichOneof("kind") == "context"]


async def test_a_delegated_answer_is_asked_of_its_own_worker_and_the_voice_says_it(
    parts: Parts,
) -> None:
    p = parts
    user = cpb.Item(
        id="item_u", type="message", role="user", status="completed",
        content=[cpb.ContentPart(type="input_text", text="Weather in Paris?")],
    )  # fmt: skip
    await p.conversation.append(user)
    await p.delegate.create(asked([WEATHER]))
    [worker] = p.workers
    opened, generate = (r.WhichOneof("kind") for r in worker.sent)
    assert (opened, generate) == ("open", "generate")
    assert worker.sent[0].open.lane == stage_pb2.LANE_MANUAL and worker.sent[0].open.skip_vad
    prompt = worker.sent[1].generate
    assert [m.content for m in prompt.messages] == ["Be brief.", "Weather in Paris?"]
    assert [t.name for t in prompt.tools] == ["get_weather"]
    rid = prompt.response_id
    assert p.journal.kinds == ["response_created"]
    assert p.journal.events[0].response_created.response.delegated

    await p.delegate.handle(
        said(worker, delta=stage_pb2.GenerationDelta(response_id=rid, text="It is "))
    )
    await p.delegate.handle(
        said(worker, delta=stage_pb2.GenerationDelta(response_id=rid, text="sunny."))
    )
    await p.delegate.handle(said(worker, done=stage_pb2.GenerationDone(response_id=rid)))
    done = p.journal.events[-2].response_done.response
    assert (done.status, done.delegated) == ("completed", True)
    assert [i.content[0].text for i in done.output] == ["It is sunny."]
    # In the history after the user's item, and into the voice's mouth.
    history = await p.conversation.items()
    assert [i.id for i in history] == ["item_u", done.output[0].id]
    assert [c.text for c in contexts(p.stage0)] == ["It is sunny."]
    assert worker.closed
    # What the voice took of the session's own text is no client's append.
    await p.context.on_taken(stage_pb2.ContextTaken(id=contexts(p.stage0)[0].id, index=9))
    assert "context_appended" not in p.journal.kinds


async def test_a_call_goes_into_the_history_and_the_voice_says_nothing_of_it(
    parts: Parts,
) -> None:
    p = parts
    await p.delegate.create(asked([WEATHER]))
    [worker] = p.workers
    rid = worker.sent[1].generate.response_id
    call = cpb.ToolCall(call_id="call_1", name="get_weather", arguments='{"city": "Paris"}')
    undeclared = cpb.ToolCall(call_id="call_2", name="launch", arguments="{}")
    await p.delegate.handle(
        said(worker, tool_call=stage_pb2.GenerationToolCall(response_id=rid, call=call))
    )
    await p.delegate.handle(
        said(worker, tool_call=stage_pb2.GenerationToolCall(response_id=rid, call=undeclared))
    )
    await p.delegate.handle(said(worker, done=stage_pb2.GenerationDone(response_id=rid)))
    done = p.journal.events[-2].response_done.response
    assert [(i.type, i.call_id, i.name) for i in done.output] == [
        ("function_call", "call_1", "get_weather")
    ]
    assert [i.call_id for i in await p.conversation.items()] == ["call_1"]
    assert contexts(p.stage0) == []
    # The next ask binds a worker of its own.
    await p.delegate.create(asked([WEATHER]))
    assert len(p.workers) == 2


async def test_one_answer_at_a_time_and_a_lost_delegate_fails_it(parts: Parts) -> None:
    p = parts
    await p.delegate.create(asked())
    with pytest.raises(Rejection) as refused:
        await p.delegate.create(asked())
    assert refused.value.code == "conversation_already_has_active_response"
    [worker] = p.workers
    await p.delegate.handle(StreamEnded(cast(Binding[Any], worker)))
    done = p.journal.events[-2].response_done.response
    assert (done.status, done.status_reason) == ("failed", "delegate_lost")
    # Its stream's end, read after the answer ended, changes nothing.
    await p.delegate.handle(StreamEnded(cast(Binding[Any], worker)))
    assert p.journal.kinds.count("response_done") == 1


async def test_no_delegate_worker_is_a_typed_refusal(parts: Parts) -> None:
    p = parts

    async def none(stage: str, failed: str) -> Any:
        raise NoWorkerError("no delegate LLM is configured (delegate_addresses)")

    p.delegate._rebind = none
    with pytest.raises(Rejection) as refused:
        await p.delegate.create(asked())
    assert (refused.value.type, refused.value.code) == ("server_error", "delegate_unavailable")
    assert p.journal.kinds == []


async def test_an_append_is_told_when_taken_and_refused_where_the_model_takes_no_text(
    parts: Parts,
) -> None:
    p = parts
    cmd = spb.ClientCommand(
        event_id="c1",
        client_type="session.commentary.append",
        append_context=spb.AppendContext(channel="commentary", text="Say hi to Ada."),
    )
    await p.context.append(cmd)
    [sent] = contexts(p.stage0)
    assert (sent.text, sent.epoch) == ("Say hi to Ada.", p.links.epoch)
    await p.context.on_taken(stage_pb2.ContextTaken(id=sent.id, index=42))
    appended = p.journal.events[-1].context_appended
    assert (appended.channel, appended.client_event_id, appended.frame_index) == (
        "commentary",
        "c1",
        42,
    )
    # Too long for the row: the backend says so, and the client is told.
    await p.context.append(cmd)
    second = contexts(p.stage0)[-1]
    assert p.context.owns(second.id)
    refused = stage_pb2.StageError(code="context_too_long", response_id=second.id, message="x")
    await p.context.on_error(refused)
    error = p.journal.events[-1].error
    assert (error.code, error.event_id) == ("context_too_long", "c1")
    assert not p.context.owns(second.id)
    p.links._info["stage0"] = moshi(takes_text=False)
    with pytest.raises(Rejection) as unsupported:
        await p.context.append(cmd)
    assert unsupported.value.code == "unsupported_capability"
    assert not p.context.say("nothing")
