"""A session's history as one pass's prompt: the tools into it, or calls in words.

History reaches the prompt as (role, content) pairs (history.py cuts those);
a call and a result are pairs of their own roles (`CALL`, `RESULT`, their
content JSON), and `renderer` turns the pairs into the chat template's
messages for one pass of the answer (tools.py runs the passes):

- with tools, the template's own way when it takes `tools=` (Qwen2.5's:
  the functions in its system block, calls as `<tool_call>` JSON, results
  as `<tool_response>`), else the functions described in the system
  message and calls written as the JSON that description asks for;
- without tools (a spoken answer), calls and results as plain words ("I
  called get_weather(...)", "get_weather returned ..."): given a result in
  the template's tool form, the small Qwen models only call again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from antiphon.v1 import common_pb2 as cpb

Message = tuple[str, str]
Json = dict[str, Any]
# The pair roles of a history call and of a function's result (content: JSON).
CALL = "function_call"
RESULT = "function_call_output"
NO_PARAMETERS: Json = {"type": "object", "properties": {}}


class ChatRenderer(Protocol):
    """What rendering a prompt needs: the chat template (chat_tokenizer.ChatTokenizer)."""

    @property
    def takes_tools(self) -> bool: ...

    def render_chat(self, messages: Sequence[Json], tools: Sequence[Json] | None = None) -> str: ...


def pairs(messages: Sequence[cpb.ChatMessage]) -> list[Message]:
    """The session's messages as (role, content) pairs, calls and results included."""
    out: list[Message] = []
    for m in messages:
        if m.role == "tool":
            out.append((RESULT, json.dumps({"call_id": m.tool_call_id, "output": m.content})))
            continue
        if m.content or not m.tool_calls:
            out.append((m.role, m.content))
        for c in m.tool_calls:
            call = {"call_id": c.call_id, "name": c.name, "arguments": c.arguments}
            out.append((CALL, json.dumps(call)))
    return out


def ends_with_result(messages: Sequence[cpb.ChatMessage]) -> bool:
    return bool(messages) and messages[-1].role == "tool"


def last_user_text(messages: Sequence[cpb.ChatMessage]) -> str:
    return next((m.content for m in reversed(messages) if m.role == "user"), "")


def renderer(llm: ChatRenderer, tools: Sequence[cpb.Tool]) -> Callable[[Sequence[Message]], str]:
    """history.fit_prompt's `render` for one pass: with `tools` in the prompt, or none."""

    def render(messages: Sequence[Message]) -> str:
        if not tools:
            return llm.render_chat(spoken_messages(messages))
        if llm.takes_tools:
            return llm.render_chat(template_messages(messages), template_tools(tools))
        return llm.render_chat(described(spoken_messages(messages, calls_as_json=True), tools))

    return render


def template_messages(messages: Sequence[Message]) -> list[Json]:
    """Messages in the form a tools-aware chat template (Qwen2.5's) renders."""
    out: list[Json] = []
    for role, content in messages:
        if role == CALL:
            call = json.loads(content)
            entry = {
                "type": "function",
                "function": {"name": call["name"], "arguments": _args(call)},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(entry)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [entry]})
        elif role == RESULT:
            out.append({"role": "tool", "content": json.loads(content)["output"]})
        else:
            out.append({"role": role, "content": content})
    return out


def spoken_messages(messages: Sequence[Message], *, calls_as_json: bool = False) -> list[Json]:
    """Messages of plain roles: a call in words (or as the JSON `described` asks
    for), a result as the user telling what the function returned."""
    names: dict[str, str] = {}
    out: list[Json] = []
    for role, content in messages:
        if role == CALL:
            call = json.loads(content)
            names[call["call_id"]] = call["name"]
            arguments = json.dumps(_args(call))
            text = (
                json.dumps({"name": call["name"], "arguments": _args(call)})
                if calls_as_json
                else f"I called {call['name']}({arguments})."
            )
            out.append({"role": "assistant", "content": text})
        elif role == RESULT:
            result = json.loads(content)
            name = names.get(result["call_id"], "The function")
            text = f"{name} returned: {result['output']}. Answer my question with it."
            out.append({"role": "user", "content": text})
        else:
            out.append({"role": role, "content": content})
    return out


def template_tools(tools: Sequence[cpb.Tool]) -> list[Json]:
    """The functions as chat templates take them (`tools=`)."""
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": parameters_schema(t),
            },
        }
        for t in tools
    ]


def described(messages: list[Json], tools: Sequence[cpb.Tool]) -> list[Json]:
    """For a template without tools: the functions told in the system message."""
    lines = ["You can call these functions:"]
    lines += [
        f"- {t.name}: {t.description} Arguments: {json.dumps(parameters_schema(t))}" for t in tools
    ]
    lines.append(
        'To call one, answer with only a JSON object: {"name": <function>, "arguments": {...}}.'
    )
    text = "\n".join(lines)
    if messages and messages[0]["role"] == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _args(call: Json) -> Json:
    """A call's arguments as an object (a history call's are JSON text)."""
    try:
        value = json.loads(call.get("arguments") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def parameters_schema(tool: cpb.Tool) -> Json:
    """A function's arguments' JSON schema (none declared: an empty object)."""
    return json.loads(tool.parameters) if tool.parameters else dict(NO_PARAMETERS)
