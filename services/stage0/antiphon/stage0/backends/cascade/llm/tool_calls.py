"""A model's function calls: the schema that guides one, and reading one out of text.

A guided pass (vLLM's structured outputs) may write only a call of the
functions `call_schema` allows. Free text may hold a call anywhere (in
`<tool_call>` tags, a fenced block, bare JSON); `CallScanner` holds it back
from what is spoken, `parse_call` reads it, and one of a name no tool
declares is `refused`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from antiphon.stage0.backends.cascade.llm.tool_prompt import Json, parameters_schema
from antiphon.v1 import common_pb2 as cpb

# What starts a call in free text, anywhere; at the very start, `{` or `[{` too.
MARKERS = ("<tool_call>", "```", '{"name"')


@dataclass(frozen=True)
class ToolCallOut:
    """A call the answer makes, or (`refused`) what looked like one but is none."""

    call: cpb.ToolCall
    refused: bool = False


def call_schema(tools: Sequence[cpb.Tool]) -> Json:
    """The JSON schema of a call of one of `tools`, with that function's arguments."""
    options: list[Json] = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, "arguments": parameters_schema(t)},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def parse_call(text: str, declared: Sequence[str]) -> ToolCallOut | None:
    """The call in what the model wrote (in `<tool_call>` tags, a fenced block,
    or bare JSON: `{"name": ..., "arguments": {...}}`, `parameters` for
    `arguments`, an OpenAI-style `function` wrapper, a list of calls of which
    the first counts). None when it holds nothing shaped like a call;
    `refused` when it names a function not in `declared`."""
    for candidate in _candidates(text):
        found = _call_object(candidate)
        if found is None:
            continue
        name, arguments = found
        call = cpb.ToolCall(name=name, arguments=json.dumps(arguments))
        if name not in declared:
            return ToolCallOut(cpb.ToolCall(name=name, arguments=text.strip()), refused=True)
        return ToolCallOut(call)
    return None


_TAGGED = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_FENCED = re.compile(r"```[A-Za-z]*\s*(.*?)(?:```|$)", re.S)


def _candidates(text: str) -> list[str]:
    found = [m.group(1) for m in _TAGGED.finditer(text)]
    found += [m.group(1) for m in _FENCED.finditer(text)]
    return [*found, text]


def _call_object(text: str) -> tuple[str, Json] | None:
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    try:
        value, _end = json.JSONDecoder().raw_decode(text[start:])
    except ValueError:
        return None
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, dict) and isinstance(value.get("function"), dict):
        value = value["function"]
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return value["name"], arguments


class CallScanner:
    """Free text in, what may be spoken now out; a call, once it starts, is held.

    A call starts at a `MARKERS` string anywhere, or at `LEADING` as the
    first thing written; text that may still become a marker is held until
    it cannot. `finish` gives back what was held: words to say, or the
    call's text to parse.
    """

    def __init__(self) -> None:
        self._held = ""
        self._said = False
        self.call_started = False
        # The call is the answer's first thing (nothing was said before it).
        self.leading = False

    def feed(self, text: str) -> str:
        self._held += text
        if self.call_started:
            return ""
        if not self._said:
            starts = _starts_call(self._held.lstrip())
            if starts is None:
                return ""
            if starts:
                self.call_started = self.leading = True
                return ""
        at = min((i for i in (self._held.find(m) for m in MARKERS) if i >= 0), default=-1)
        if at >= 0:
            say, self._held = self._held[:at], self._held[at:]
            self.call_started = True
        else:
            keep = _marker_prefix(self._held)
            say, self._held = (
                self._held[: len(self._held) - keep],
                self._held[len(self._held) - keep :],
            )
        self._said = self._said or bool(say.strip())
        return say

    def finish(self) -> tuple[str, str]:
        """(words still to say, the call's text): one of them is ""."""
        held, self._held = self._held, ""
        return ("", held) if self.call_started else (held, "")


def _starts_call(head: str) -> bool | None:
    """Whether an answer beginning `head` begins with a call; None: too soon to tell."""
    if head.startswith("["):
        rest = head[1:].lstrip()
        return rest.startswith("{") if rest else None
    if head.startswith("{") or any(head.startswith(m) for m in MARKERS):
        return True
    if not head or any(m.startswith(head) for m in MARKERS):
        return None
    return False


def _marker_prefix(text: str) -> int:
    """How long a tail of `text` may still grow into a marker."""
    return max(
        (n for m in MARKERS for n in range(1, len(m)) if text.endswith(m[:n])),
        default=0,
    )


def refused_call(text: str) -> ToolCallOut:
    """What a guided pass wrote that is no call of its functions."""
    found = _call_object(text)
    name = found[0] if found is not None else ""
    return ToolCallOut(cpb.ToolCall(name=name, arguments=text.strip()), refused=True)
