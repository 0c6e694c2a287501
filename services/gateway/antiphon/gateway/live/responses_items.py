"""`response.item.create`'s item (a Responses input item) -> the session's item.

The delegated conversation is the session's own history: what the voice
model said, and what the client adds here. Responses writes its items a
little differently from Realtime (a message's `content` may be a bare
string, `type` may be left out of one, `developer` is a role), so they are
read into Realtime's shapes and then built as `conversation.item.create`'s
are, with the same checks and errors. Only text messages, function calls
and their outputs are taken: the delegate is a text model.
"""

from __future__ import annotations

from typing import Any

from antiphon.common.audio_formats import PCM16
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate import fields
from antiphon.gateway.translate.items import create_item
from antiphon.v1 import session_pb2 as spb

_TYPES = ("message", "function_call", "function_call_output")


def responses_item(event: fields.Event) -> spb.CreateItem:
    item = fields.obj(fields.required(event, "item"), "item")
    kind = item.get("type", "message")
    if kind not in _TYPES:
        raise ClientError(
            "unsupported_capability",
            f"{kind!r} items are not taken: only {_TYPES} are",
            param="item.type",
        )
    body = dict(item, type=kind)
    if kind == "message":
        body = _message(body)
    elif kind == "function_call_output":
        body["output"] = _output(body.get("output"))
    # Responses' ids are its own; the session names the item.
    body.pop("id", None)
    body.pop("status", None)
    return create_item({"item": body}, PCM16)


def _message(body: fields.Event) -> fields.Event:
    role = body.get("role")
    if role == "developer":
        body["role"] = role = "system"
    content = body.get("content")
    if isinstance(content, str):
        part = "output_text" if role == "assistant" else "input_text"
        body["content"] = [{"type": part, "text": content}]
    return body


def _output(value: Any) -> Any:
    """A call's output: a string, or text parts joined into one."""
    if not isinstance(value, list):
        return value
    texts = []
    for i, part in enumerate(value):
        part = fields.obj(part, f"item.output[{i}]")
        if part.get("type") != "input_text":
            raise ClientError(
                "unsupported_capability",
                "a function call's output is text here",
                param=f"item.output[{i}].type",
            )
        texts.append(fields.string(part.get("text"), f"item.output[{i}].text"))
    return "".join(texts)
