"""Tools on the session: declared and judged, carried to stage0, and a call the
model makes told as OpenAI tells it; with plain objects (no Redis, gRPC or sockets)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from antiphon.session.actor.errors import Rejection
from antiphon.session.actor.journal import Emitter
from antiphon.session.assistant.preemption import Preemption
from antiphon.session.assistant.response_control import ResponseControl
from antiphon.session.assistant.responses import Event
from antiphon.session.config import policy, session_config
from antiphon.session.config.current_config import CurrentConfig
from antiphon.session.conversation import items
from antiphon.session.conversation.conversation import Conversation
from antiphon.session.metrics import SessionMetrics
from antiphon.session.state.store import SessionStore
from antiphon.session.user.turns import Turns
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.session.test_parts import _links

CEILING = 512
WEATHER = cpb.Tool(
    name="get_weather",
    description="Get the weather.",
    parameters=json.dumps({"type": "object", "properties": {"city": {"type": "string"}}}),
)


def config(*declared: cpb.Tool, mode: str = "auto", name: str = "") -> cpb.SessionConfig:
    patch = cpb.SessionConfigPatch(
        tools=declared, has_tools=True, tool_choice=cpb.ToolChoice(mode=mode, name=name)
    )
    return session_config.merge(session_config.defaults(), patch, max_output_tokens=CEILING)


# ------------------------------------------------------------------ config
def test_session_update_stores_the_tools_and_the_choice_and_keeps_them() -> None:
    cfg = config(WEATHER, mode="function", name="get_weather")
    assert [t.name for t in cfg.tools] == ["get_weather"]
    assert (cfg.tool_choice.mode, cfg.tool_choice.name) == ("function", "get_weather")
    # An update that names neither keeps both; an empty list removes every tool.
    kept = session_config.merge(
        cfg, cpb.SessionConfigPatch(instructions="x"), max_output_tokens=CEILING
    )
    assert [t.name for t in kept.tools] == ["get_weather"]
    cleared = session_config.merge(
        kept,
        cpb.SessionConfigPatch(has_tools=True, tool_choice=cpb.ToolChoice(mode="auto")),
        max_output_tokens=CEILING,
    )
    assert list(cleared.tools) == [] and cleared.tool_choice.mode == "auto"
    assert session_config.defaults().tool_choice.mode == "auto"


@pytest.mark.parametrize(
    ("declared", "choice", "param"),
    [
        ([cpb.Tool(name="get weather")], cpb.ToolChoice(mode="auto"), "tools[0].name"),
        ([WEATHER, WEATHER], cpb.ToolChoice(mode="auto"), "tools[1].name"),
        (
            [cpb.Tool(name="f", parameters="[1]")],
            cpb.ToolChoice(mode="auto"),
            "tools[0].parameters",
        ),
        ([WEATHER], cpb.ToolChoice(mode="function", name="get_time"), "tool_choice.name"),
        ([WEATHER], cpb.ToolChoice(mode="sometimes"), "tool_choice"),
    ],
)
def test_tools_a_model_cannot_be_given_are_refused_and_change_nothing(
    declared: list[cpb.Tool], choice: cpb.ToolChoice, param: str
) -> None:
    patch = cpb.SessionConfigPatch(tools=declared, has_tools=True, tool_choice=choice)
    with pytest.raises(session_config.ConfigError) as refused:
        session_config.merge(session_config.defaults(), patch, max_output_tokens=CEILING)
    assert (refused.value.code, refused.value.param) == ("invalid_value", param)


def test_a_response_may_bring_its_own_tools_and_choice() -> None:
    cfg = config(WEATHER)
    req = spb.CreateResponse(tool_choice=cpb.ToolChoice(mode="required"))
    opts = policy.requested_options(cfg, req, CEILING)
    assert [t.name for t in opts.tools] == ["get_weather"] and opts.tool_choice.mode == "required"
    none = policy.requested_options(cfg, spb.CreateResponse(has_tools=True), CEILING)
    assert none.tools == [] and not none.may_call
    with pytest.raises(Rejection) as refused:
        policy.requested_options(
            cfg,
            spb.CreateResponse(tool_choice=cpb.ToolChoice(mode="function", name="nope")),
            CEILING,
        )
    assert refused.value.param == "response.tool_choice.name"


def test_history_calls_and_results_reach_stage0_typed() -> None:
    call = cpb.Item(id="i1", type="function_call", call_id="call_1", name="f", arguments="{}")
    result = cpb.Item(id="i2", type="function_call_output", call_id="call_1", output="42")
    (asked,) = items.prompt_messages(call)
    assert (asked.role, list(asked.tool_calls)) == (
        "assistant",
        [cpb.ToolCall(call_id="call_1", name="f", arguments="{}")],
    )
    (told,) = items.prompt_messages(result)
    assert (told.role, told.content, told.tool_call_id) == ("tool", "42", "call_1")


# ------------------------------------------------------- calls in a response
class Recorder:
    """An emitter that keeps what it would journal and send."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    async def emit(self, kind: str, msg: Any) -> None:
        self.events.append((kind, msg))

    async def emit_all(self, events: list[Event]) -> None:
        self.events.extend(events)

    async def error(self, error: spb.ErrorEvent) -> None:
        self.events.append(("error", error))

    def take(self) -> list[str]:
        kinds = [k for k, _ in self.events]
        self.events.clear()
        return kinds


class ListStore:
    """The history list of one session, in memory."""

    def __init__(self) -> None:
        self.items: list[bytes] = []

    async def history(self, session_id: str) -> list[bytes]:
        return list(self.items)

    async def append_history(self, session_id: str, token: str, item: bytes) -> int:
        self.items.append(item)
        return len(self.items)

    async def edit_history(
        self, session_id: str, token: str, op: str, at: bytes, item: bytes = b""
    ) -> int:
        assert op == "insert_after"
        if at and at not in self.items:
            return -1
        self.items.insert(self.items.index(at) + 1 if at else 0, item)
        return len(self.items)


class Session:
    """A response controller on recording parts, with one user turn in history."""

    def __init__(self, cfg: cpb.SessionConfig) -> None:
        self.cfg = cfg
        self.emitter = Recorder()
        self.links, self.stage0, self.stage1 = _links()
        self.store = ListStore()
        self.conversation = Conversation(cast(SessionStore, self.store), "s", "own")
        self.turns = Turns("s", last_item_id="item_user", turn_id=1)
        self.control = ResponseControl(
            config=CurrentConfig("s", cfg, max_output_tokens=CEILING),
            emitter=cast(Emitter, self.emitter),
            links=self.links,
            turns=self.turns,
            conversation=self.conversation,
            metrics=SessionMetrics(CollectorRegistry()),
            preemption=Preemption(links=self.links, count=lambda _outcome: None),
        )

    async def start(self) -> str:
        await self.conversation.append(items.user_text_item("item_user", "Weather in Paris?"))
        await self.control.start(policy.default_options(self.cfg, CEILING), eager=True)
        r = self.control.active
        assert r is not None
        return r.id

    def generate(self) -> stage_pb2.Generate:
        (req,) = [r.generate for r in self.stage0.sent if r.HasField("generate")]
        return req

    async def history(self) -> list[str]:
        return [i.type for i in await self.conversation.items()]


def call(response_id: str, name: str = "get_weather", refused: bool = False) -> Any:
    return stage_pb2.GenerationToolCall(
        epoch=4,
        response_id=response_id,
        call=cpb.ToolCall(name=name, arguments='{"city": "Paris"}'),
        refused=refused,
    )


def done(response_id: str) -> stage_pb2.GenerationDone:
    return stage_pb2.GenerationDone(epoch=4, response_id=response_id, finish_reason="stop")


def of(events: Sequence[tuple[str, Any]], kind: str) -> list[Any]:
    return [msg for k, msg in events if k == kind]


CALL_EVENTS = [
    "item_added",
    "item_created",
    "output_item_added",
    "function_call_arguments_delta",
    "function_call_arguments_done",
    "output_item_done",
    "item_done",
    "response_done",
    "rate_limits_updated",
]


async def test_a_response_that_only_calls_has_no_message_and_says_nothing() -> None:
    s = Session(config(WEATHER))
    rid = await s.start()
    req = s.generate()
    assert [t.name for t in req.tools] == ["get_weather"] and req.tool_choice.mode == "auto"
    # The message waits for something to say: only `response.created` so far.
    assert s.emitter.take() == ["response_created"]
    await s.control.on_tool_call(call(rid))
    assert s.emitter.take() == []
    await s.control.on_generation_done(done(rid))
    events = list(s.emitter.events)
    assert [k for k, _ in events] == CALL_EVENTS
    added, finished = of(events, "output_item_added")[0], of(events, "output_item_done")[0]
    assert (added.item.status, added.item.arguments) == ("in_progress", "")
    assert (finished.item.status, finished.item.name) == ("completed", "get_weather")
    assert finished.item.call_id.startswith("call_") and finished.output_index == 0
    (arguments,) = of(events, "function_call_arguments_done")
    assert (arguments.name, arguments.arguments, arguments.ref.item_id) == (
        "get_weather",
        '{"city": "Paris"}',
        finished.item.id,
    )
    (response,) = of(events, "response_done")
    assert response.response.status == "completed"
    assert [i.type for i in response.response.output] == ["function_call"]
    # Nothing went to the voice, and the call is history, the last item of the turn.
    assert s.stage1.sent == []
    assert await s.history() == ["message", "function_call"]
    assert s.turns.last_item_id == finished.item.id


async def test_words_before_a_call_are_said_then_the_call_follows_the_message() -> None:
    s = Session(config(WEATHER))
    rid = await s.start()
    s.emitter.take()
    await s.control.on_delta(
        stage_pb2.GenerationDelta(epoch=4, response_id=rid, text="Let me see.")
    )
    assert s.emitter.take() == [
        "item_added",
        "item_created",
        "output_item_added",
        "content_part_added",
        "response_speak",
    ]
    await s.control.on_tool_call(call(rid))
    await s.control.on_generation_done(done(rid))
    assert [r.text.final for r in s.stage1.sent] == [False, True]
    await s.control.on_speech_done(stage_pb2.SynthesisDone(epoch=4, response_id=rid))
    events = list(s.emitter.events)
    (response,) = of(events, "response_done")
    assert [i.type for i in response.response.output] == ["message", "function_call"]
    assert [e.output_index for e in of(events, "output_item_done")] == [0, 1]
    message_done, call_done = of(events, "item_done")
    assert call_done.previous_item_id == message_done.item.id
    assert await s.history() == ["message", "message", "function_call"]


async def test_a_call_of_an_undeclared_function_is_the_raw_fallback_and_no_item() -> None:
    s = Session(config(WEATHER))
    rid = await s.start()
    s.emitter.take()
    await s.control.on_tool_call(call(rid, name="search"))
    await s.control.on_tool_call(call(rid, refused=True))
    malformed = of(s.emitter.events, "function_call_malformed")
    assert [(m.name, m.response_id, m.epoch) for m in malformed] == [
        ("search", rid, 4),
        ("get_weather", rid, 4),
    ]
    await s.control.on_generation_done(done(rid))
    (response,) = of(s.emitter.events, "response_done")
    assert list(response.response.output) == [] and await s.history() == ["message"]
    assert s.turns.last_item_id == "item_user"


async def test_a_cancelled_response_calls_nothing() -> None:
    s = Session(config(WEATHER))
    rid = await s.start()
    await s.control.on_tool_call(call(rid))
    await s.control.cancel(rid)
    events = list(s.emitter.events)
    assert of(events, "function_call_arguments_done") == []
    (response,) = of(events, "response_done")
    assert response.response.status == "cancelled" and list(response.response.output) == []
    assert await s.history() == ["message"]


async def test_without_tools_the_message_opens_at_once_as_before() -> None:
    s = Session(session_config.defaults())
    rid = await s.start()
    assert s.emitter.take()[:4] == [
        "response_created",
        "item_added",
        "item_created",
        "output_item_added",
    ]
    assert list(s.generate().tools) == []
    # A call stage0 should not have made is no call here either.
    await s.control.on_tool_call(call(rid))
    assert s.emitter.take() == ["function_call_malformed"]


async def test_with_tool_choice_none_the_message_opens_at_once() -> None:
    s = Session(config(WEATHER, mode="none"))
    await s.start()
    assert s.emitter.take()[:2] == ["response_created", "item_added"]
    assert s.generate().tool_choice.mode == "none"
