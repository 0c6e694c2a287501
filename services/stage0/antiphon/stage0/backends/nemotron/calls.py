"""Nemotron VoiceChat's function channel read as tool calls.

The model's function head says one token a frame beside its speech, padding
while it calls nothing. A call is what it says between the start-of-call and
end-of-call tokens (`<SPECIAL_20>`, `<SPECIAL_21>` in its tokenizer): the
text of a JSON list of `{"name", "arguments"}` objects, wrapped in
`<TOOLCALL>...</TOOLCALL>` as its prompt asks (prompting.py). Each becomes a
`ToolCall` with an id of ours; what does not parse, or names no function,
is refused whole, with the text it said (the session's raw fallback).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from antiphon.common.ids import new_id
from antiphon.v1 import common_pb2 as cpb

OPEN_TAG, CLOSE_TAG = "<TOOLCALL>", "</TOOLCALL>"
# Longest call text kept; a model that never closes its call is cut off here.
MAX_CALL_TOKENS = 2048


@dataclass(frozen=True)
class Said:
    """One call the model made, or (refused) what it said that was none."""

    call: cpb.ToolCall
    refused: bool = False


class CallReader:
    """One row's function channel, token by token."""

    def __init__(
        self, *, start: int, end: int, pad: int, decode: Callable[[list[int]], str]
    ) -> None:
        self._start, self._end, self._pad = start, end, pad
        self._decode = decode
        self._tokens: list[int] | None = None  # None: not inside a call

    def push(self, token: int) -> list[Said]:
        """The channel's next token; the calls it closed."""
        if token == self._start:
            self._tokens = []
            return []
        if self._tokens is None:
            return []
        if token == self._end:
            text, self._tokens = self._decode(self._tokens), None
            return parse(text)
        if token != self._pad:
            self._tokens.append(token)
            if len(self._tokens) > MAX_CALL_TOKENS:
                text, self._tokens = self._decode(self._tokens), None
                return [_refused(text)]
        return []


def parse(text: str) -> list[Said]:
    """The calls in what the model said between its call marks."""
    body = text.strip()
    if OPEN_TAG in body:
        body = body.split(OPEN_TAG, 1)[1]
    if CLOSE_TAG in body:
        body = body.split(CLOSE_TAG, 1)[0]
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return [_refused(text)]
    entries = value if isinstance(value, list) else [value]
    calls: list[Said] = []
    for entry in entries:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name.strip():
            return [_refused(text)]
        arguments = entry.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError:
                return [_refused(text)]
        if not isinstance(arguments, dict):
            return [_refused(text)]
        call = cpb.ToolCall(
            call_id=new_id("call"), name=name.strip(), arguments=json.dumps(arguments)
        )
        calls.append(Said(call))
    return calls or [_refused(text)]


def _refused(text: str) -> Said:
    return Said(cpb.ToolCall(arguments=text), refused=True)
