"""The `conversation.item.*` client events -> their typed requests: a
created item (messages, tool calls and their results, in OpenAI's shapes),
and the item a retrieve, delete or truncate names.

An `input_audio` part's audio is in the session's input format, as OpenAI
defines it, and is decoded to PCM16 here like an append's.
"""

from __future__ import annotations

from typing import Any

from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate import fields
from antiphon.gateway.translate.audio_formats import base64_audio, decode_field
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

ROLES = ("user", "assistant", "system")
TEXT_PARTS = ("input_text", "text", "output_text")
# `conversation.item.create` item types (OpenAI's: messages, tool calls and their results).
ITEM_TYPES = ("message", "function_call", "function_call_output")
# `previous_item_id` that inserts at the start of the conversation (OpenAI's spelling).
ROOT_ITEM = "root"


def create_item(event: fields.Event, input_encoding: str) -> spb.CreateItem:
    body = fields.obj(fields.required(event, "item"), "item")
    create = spb.CreateItem(item=_item(body, input_encoding))
    previous = event.get("previous_item_id")
    # Absent or null appends (OpenAI: "if not set, appended to the end");
    # "root" inserts first, which the proto spells "".
    if previous is not None:
        previous = fields.non_empty_string(previous, "previous_item_id")
        create.previous_item_id = "" if previous == ROOT_ITEM else previous
    return create


def item_ref(event: fields.Event) -> spb.ItemRef:
    """The item a `conversation.item.retrieve` or `.delete` names."""
    return spb.ItemRef(item_id=_item_id(event))


def truncation(event: fields.Event) -> spb.TruncateItem:
    """A `conversation.item.truncate`: the item, its part, and the audio kept."""
    return spb.TruncateItem(
        item_id=_item_id(event),
        content_index=fields.non_negative_int(
            fields.required(event, "content_index"), "content_index", fields.INT32_MAX
        ),
        audio_end_ms=fields.non_negative_int(
            fields.required(event, "audio_end_ms"), "audio_end_ms"
        ),
    )


def _item_id(event: fields.Event) -> str:
    return fields.non_empty_string(fields.required(event, "item_id"), "item_id")


def _item(body: fields.Event, input_encoding: str) -> cpb.Item:
    kind = fields.string(fields.required(body, "type", "item.type"), "item.type")
    out = cpb.Item(type=kind)
    if body.get("id") is not None:
        out.id = fields.non_empty_string(body["id"], "item.id")
    if kind == "function_call":
        # A call the client's history holds (OpenAI: `name` and `arguments`
        # required, `call_id` optional; the session names one when absent).
        out.name = fields.non_empty_string(fields.required(body, "name", "item.name"), "item.name")
        out.arguments = fields.string(
            fields.required(body, "arguments", "item.arguments"), "item.arguments"
        )
        if body.get("call_id") is not None:
            out.call_id = fields.non_empty_string(body["call_id"], "item.call_id")
        return out
    if kind == "function_call_output":
        out.call_id = fields.non_empty_string(
            fields.required(body, "call_id", "item.call_id"), "item.call_id"
        )
        out.output = fields.string(fields.required(body, "output", "item.output"), "item.output")
        return out
    if kind != "message":
        raise ClientError(
            "invalid_value", f"`item.type` must be one of {ITEM_TYPES}", param="item.type"
        )
    out.role = fields.one_of(fields.required(body, "role", "item.role"), ROLES, "item.role")
    content = fields.required(body, "content", "item.content")
    if not isinstance(content, list) or not content:
        raise ClientError(
            "invalid_value", "`item.content` must be a non-empty list", param="item.content"
        )
    out.content.extend(
        _content_part(part, out.role, f"item.content[{i}]", input_encoding)
        for i, part in enumerate(content)
    )
    return out


def _content_part(value: Any, role: str, param: str, input_encoding: str) -> cpb.ContentPart:
    part = fields.obj(value, param)
    kind = fields.string(fields.required(part, "type", f"{param}.type"), f"{param}.type")
    if kind in TEXT_PARTS:
        text = fields.string(fields.required(part, "text", f"{param}.text"), f"{param}.text")
        return cpb.ContentPart(type=kind, text=text)
    if kind != "input_audio" or role != "user":
        allowed = (*TEXT_PARTS, "input_audio") if role == "user" else TEXT_PARTS
        raise ClientError(
            "invalid_value",
            f"a {role} message's content types are {allowed}",
            param=f"{param}.type",
        )
    audio, transcript = part.get("audio"), part.get("transcript")
    if audio is None and transcript is None:
        raise ClientError(
            "missing_required_parameter",
            f"an input_audio part needs `audio` or `transcript` (`{param}.audio`)",
            param=f"{param}.audio",
        )
    out = cpb.ContentPart(type=kind)
    if transcript is not None:
        out.transcript = fields.string(transcript, f"{param}.transcript")
    if audio is not None:
        raw = base64_audio(audio, f"{param}.audio")
        pcm = decode_field(raw, input_encoding, f"{param}.audio")
        out.audio, out.sample_rate_hz = pcm.pcm16, pcm.sample_rate_hz
    return out
