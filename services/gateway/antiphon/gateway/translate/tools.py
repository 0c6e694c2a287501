"""OpenAI's `tools` and `tool_choice`, both ways: the client's JSON (of
`session.update` and `response.create`) -> the typed Tool and ToolChoice,
and back into the session object both dialects show.

Only function tools exist here (MCP servers are out of reach of the stage
workers). The gateway checks each value's type; the session judges the
whole (unique names, a forced function that is declared).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate import fields
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

# `tool_choice` as a string; a function is forced with {"type": "function", "name": ...}.
CHOICE_MODES = ("auto", "none", "required")
# What a tool's `parameters` reads as when it declares none.
NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def read_into(
    body: fields.Event, target: cpb.SessionConfigPatch | spb.CreateResponse, where: str
) -> None:
    """`tools` and `tool_choice` of a `session` or `response` body, where set."""
    if body.get("tools") is not None:
        target.tools.extend(tools(body["tools"], f"{where}.tools"))
        target.has_tools = True
    if body.get("tool_choice") is not None:
        target.tool_choice.CopyFrom(tool_choice(body["tool_choice"], f"{where}.tool_choice"))


def tools(value: Any, param: str) -> list[cpb.Tool]:
    if not isinstance(value, list):
        raise ClientError("invalid_value", f"`{param}` must be a list of tools", param=param)
    return [
        _tool(fields.obj(entry, f"{param}[{i}]"), f"{param}[{i}]") for i, entry in enumerate(value)
    ]


def _tool(t: fields.Event, param: str) -> cpb.Tool:
    kind = t.get("type", "function")
    if kind != "function":
        raise ClientError(
            "invalid_value",
            f"`{param}.type` {kind!r} is not supported; only 'function' tools are",
            param=f"{param}.type",
        )
    name = fields.non_empty_string(fields.required(t, "name", f"{param}.name"), f"{param}.name")
    out = cpb.Tool(name=name)
    if t.get("description") is not None:
        out.description = fields.string(t["description"], f"{param}.description")
    if t.get("parameters") is not None:
        schema = fields.obj(t["parameters"], f"{param}.parameters")
        out.parameters = json.dumps(schema, separators=(",", ":"))
    return out


def tool_choice(value: Any, param: str) -> cpb.ToolChoice:
    if isinstance(value, str):
        return cpb.ToolChoice(mode=fields.one_of(value, CHOICE_MODES, param))
    choice = fields.obj(value, param)
    kind = choice.get("type")
    if kind != "function":
        raise ClientError(
            "invalid_value",
            f"`{param}` must be one of {CHOICE_MODES} or {{'type': 'function', 'name': ...}}",
            param=f"{param}.type",
        )
    name = fields.non_empty_string(
        fields.required(choice, "name", f"{param}.name"), f"{param}.name"
    )
    return cpb.ToolChoice(mode="function", name=name)


# ------------------------------------------------------------------ shapes
def tools_json(declared: Iterable[cpb.Tool]) -> list[dict[str, Any]]:
    """The session's tools as OpenAI shows them (`RealtimeFunctionTool`)."""
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": json.loads(t.parameters) if t.parameters else NO_PARAMETERS,
        }
        for t in declared
    ]


def tool_choice_json(choice: cpb.ToolChoice) -> str | dict[str, str]:
    if choice.mode == "function":
        return {"type": "function", "name": choice.name}
    return choice.mode or "auto"
