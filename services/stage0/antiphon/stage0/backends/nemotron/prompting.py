"""What a Nemotron VoiceChat row hears before its call: the session's
instructions and tools as one system prompt, in the format the model was
trained on (NVIDIA's serving writes it so), and a function's result as the
text that goes into its function channel."""

from __future__ import annotations

import json
from collections.abc import Sequence

from antiphon.v1.common_pb2 import Tool

# The published serving takes at most this many tools a session.
MAX_TOOLS = 5


class TooManyToolsError(ValueError):
    pass


def system_prompt(instructions: str, tools: Sequence[Tool]) -> str:
    if not tools:
        return instructions
    if len(tools) > MAX_TOOLS:
        raise TooManyToolsError(f"{len(tools)} tools; this model takes at most {MAX_TOOLS}")
    available = json.dumps([_definition(t) for t in tools], ensure_ascii=False, sort_keys=True)
    return (
        f"{instructions}\n\n"
        "You can use the following tools to assist the user if required:"
        f"\n<AVAILABLE_TOOLS>{available}</AVAILABLE_TOOLS>\n\n"
        "If you decide to call any tool(s), use the following format:\n"
        '<TOOLCALL>[{"name": "tool_name1", "arguments": "tool_args1"}, '
        '{"name": "tool_name2", "arguments": "tool_args2"}]</TOOLCALL>\n\n'
        "The user will execute tool-calls and return responses from tool(s) in this format:\n"
        '<TOOL_RESPONSE>[{"tool_response1"}, {"tool_response2"}]</TOOL_RESPONSE>\n\n'
        "Based on the tool responses, you can call additional tools if needed, "
        "correct tool calls if any errors are found, or just respond to the user."
    )


def tool_response(output: str) -> str:
    """A function's result as the model reads it back: JSON as JSON, other
    text as a JSON string."""
    try:
        value = json.loads(output)
    except json.JSONDecodeError:
        value = output
    payload = json.dumps([value], ensure_ascii=True, separators=(",", ":"))
    return f"<TOOL_RESPONSE>{payload}</TOOL_RESPONSE>"


def _definition(tool: Tool) -> dict[str, object]:
    definition: dict[str, object] = {"name": tool.name}
    if tool.description:
        definition["description"] = tool.description
    if tool.parameters:
        definition["parameters"] = json.loads(tool.parameters)
    return definition
