"""The functions a response may call, as the session judges them.

The gateway types `tools` and `tool_choice`; what needs the whole list is
judged here, for `session.update` (on the merged configuration) and for a
`response.create` that brings its own: names OpenAI would take, each
declared once, parameters that are a JSON object, and a forced function
that is one of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from antiphon.v1 import common_pb2 as cpb

# OpenAI's rule for a function's name.
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MODES = ("auto", "none", "required", "function")
AUTO = cpb.ToolChoice(mode="auto")


def problem(tools: Sequence[cpb.Tool], choice: cpb.ToolChoice) -> tuple[str, str] | None:
    """What is wrong with these tools and this choice, as (message, param); None if nothing."""
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not NAME.fullmatch(tool.name):
            return (
                f"tool name {tool.name!r} must be 1-64 characters of a-z A-Z 0-9 _ -",
                f"tools[{i}].name",
            )
        if tool.name in seen:
            return f"tool {tool.name!r} is declared twice", f"tools[{i}].name"
        seen.add(tool.name)
        if tool.parameters and not _is_object(tool.parameters):
            return "a tool's parameters must be a JSON Schema object", f"tools[{i}].parameters"
    mode = choice.mode or "auto"
    if mode not in MODES:
        return f"tool_choice must be one of {MODES[:3]} or a function", "tool_choice"
    if mode == "function" and choice.name not in seen:
        return f"tool_choice names {choice.name!r}, which no tool declares", "tool_choice.name"
    return None


def may_call(tools: Sequence[cpb.Tool], choice: cpb.ToolChoice) -> bool:
    """Whether a response with these tools may answer with a call."""
    return bool(tools) and choice.mode != "none"


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
