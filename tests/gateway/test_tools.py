"""`tools` and `tool_choice` at the edge: read from `session.update` and
`response.create` as the official SDK sends them, shown back in both dialects'
session objects, and a call's events in OpenAI's shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai._utils import maybe_transform
from openai.types.realtime import RealtimeClientEventParam, ResponseCreateEvent

from antiphon.gateway.dialects.native import project_native
from antiphon.gateway.dialects.openai_dialect import project_openai
from antiphon.gateway.dialects.projector import project
from antiphon.gateway.translate.translator import Translator
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.gateway import client_events as client
from tests.gateway import server_events as server
from tests.support import openai_models

PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city"}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the weather in a city.",
    "parameters": PARAMETERS,
}


def _update(**session: Any) -> spb.ClientCommand:
    event: Any = {"type": "session.update", "session": {"type": "realtime", **session}}
    wire = client.sdk_wire(event)
    return Translator().translate(wire)


def test_the_sdk_s_tools_and_choice_reach_the_patch() -> None:
    patch = _update(tools=[WEATHER], tool_choice="required").update.config
    assert patch.has_tools
    (tool,) = patch.tools
    assert (tool.name, tool.description) == ("get_weather", "Get the weather in a city.")
    assert json.loads(tool.parameters) == PARAMETERS
    assert patch.tool_choice == cpb.ToolChoice(mode="required")
    forced = _update(tool_choice={"type": "function", "name": "get_weather"}).update.config
    assert forced.tool_choice == cpb.ToolChoice(mode="function", name="get_weather")
    assert not forced.has_tools


def test_an_update_without_tools_leaves_them_and_an_empty_list_clears_them() -> None:
    assert not _update(instructions="x").update.config.has_tools
    cleared = _update(tools=[]).update.config
    assert cleared.has_tools and list(cleared.tools) == []


@pytest.mark.parametrize(
    ("tools", "param"),
    [
        ({"name": "f"}, "session.tools"),
        ([{"type": "mcp", "server_label": "x"}], "session.tools[0].type"),
        ([{"type": "function"}], "session.tools[0].name"),
        ([{"type": "function", "name": "f", "parameters": "{}"}], "session.tools[0].parameters"),
    ],
)
def test_tools_of_the_wrong_shape_are_refused_by_name(tools: Any, param: str) -> None:
    error = client.refused({"type": "session.update", "session": {"tools": tools}})
    assert error.param == param


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        ("sometimes", "session.tool_choice"),
        ({"type": "mcp", "server_label": "x"}, "session.tool_choice.type"),
        ({"type": "function"}, "session.tool_choice.name"),
    ],
)
def test_a_tool_choice_not_openai_s_is_refused(choice: Any, param: str) -> None:
    error = client.refused({"type": "session.update", "session": {"tool_choice": choice}})
    assert error.param == param


def test_response_create_brings_its_own_tools_and_choice() -> None:
    wire = json.loads(
        json.dumps(
            maybe_transform(
                {
                    "type": "response.create",
                    "response": {"tools": [WEATHER], "tool_choice": "none"},
                },
                RealtimeClientEventParam,
            )
        )
    )
    ResponseCreateEvent.model_validate(wire)
    req = Translator().translate(wire).create_response
    assert req.has_tools and [t.name for t in req.tools] == ["get_weather"]
    assert req.tool_choice == cpb.ToolChoice(mode="none")
    plain = Translator().translate({"type": "response.create"}).create_response
    assert not plain.has_tools and not plain.HasField("tool_choice")


def _with_tools() -> spb.SessionState:
    tool = cpb.Tool(
        name="get_weather", description="Get the weather.", parameters=json.dumps(PARAMETERS)
    )
    return server.openai_state(
        input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
        tools=[tool, cpb.Tool(name="get_time")],
        tool_choice=cpb.ToolChoice(mode="function", name="get_time"),
    )


def test_both_dialects_show_the_tools_as_openai_spells_them() -> None:
    openai = project_openai(server.event("session_updated", _with_tools()))
    duplex = project(server.event("session_updated", _with_tools()))
    assert openai is not None and openai_models.violations(openai) == []
    for session in (openai["session"], duplex["session"]):
        assert session["tools"] == [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Get the weather.",
                "parameters": PARAMETERS,
            },
            {
                "type": "function",
                "name": "get_time",
                "description": "",
                "parameters": {"type": "object", "properties": {}},
            },
        ]
        assert session["tool_choice"] == {"type": "function", "name": "get_time"}


def _call(status: str, arguments: str) -> cpb.Item:
    return cpb.Item(
        id="item_fc_01",
        type="function_call",
        status=status,
        call_id="call_7d1f",
        name="get_weather",
        arguments=arguments,
    )


def test_a_call_s_item_events_are_openai_s_strictly() -> None:
    for kind, status, arguments in (
        ("output_item_added", "in_progress", ""),
        ("output_item_done", "completed", '{"city":"Paris"}'),
    ):
        body = spb.OutputItemEvent(
            response_id="resp_fc_01", output_index=1, item=_call(status, arguments)
        )
        frame = project_openai(server.event(kind, body))
        assert frame is not None and openai_models.violations(frame) == []
        assert frame["item"]["arguments"] == arguments and frame["output_index"] == 1
    done = spb.Response(id="resp_fc_01", status="completed", output=[_call("completed", "{}")])
    frame = project_openai(server.event("response_done", spb.ResponseEvent(response=done)))
    assert frame is not None and openai_models.violations(frame) == []
    assert frame["response"]["output"][0]["type"] == "function_call"


def test_a_malformed_call_is_a_duplex_diagnostic_only() -> None:
    malformed = spb.MalformedFunctionCall(
        session_id="s", epoch=3, response_id="resp_1", name="search", arguments='{"name": "search"}'
    )
    assert project_openai(server.event("function_call_malformed", malformed)) is None
    native = project_native(server.event("function_call_malformed", malformed))
    assert {k: native[k] for k in ("type", "call_id", "name", "arguments")} == {
        "type": "function_call.done",
        "call_id": None,
        "name": "search",
        "arguments": '{"name": "search"}',
    }
