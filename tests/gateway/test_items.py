"""The `conversation.item.*` client events -> their typed requests (`items`):
the reference's examples, OpenAI's shapes, and one typed error for each bad field."""

from __future__ import annotations

from typing import Any

import pytest

from antiphon.common import g711
from antiphon.gateway.translate.fields import INT32_MAX
from antiphon.gateway.translate.translator import Translator
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.gateway import client_events as client


# ------------------------------------------------------ conversation items
def _create(item: Any, **extra: Any) -> spb.ClientCommand:
    return Translator().translate({"type": "conversation.item.create", "item": item, **extra})


def test_item_create_text_message_from_the_reference() -> None:
    cmd = _create(
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Summarise what I said."}],
        },
        previous_item_id=None,
    )
    create = cmd.create_item
    assert create.item == cpb.Item(
        type="message",
        role="user",
        content=[cpb.ContentPart(type="input_text", text="Summarise what I said.")],
    )
    # `previous_item_id: null` appends, exactly like leaving it out.
    assert not create.HasField("previous_item_id")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, None),
        ({"previous_item_id": None}, None),
        ({"previous_item_id": "root"}, ""),
        ({"previous_item_id": "item_9"}, "item_9"),
    ],
)
def test_previous_item_id_absent_null_root_or_an_id(
    extra: dict[str, Any], expected: str | None
) -> None:
    """Absent/null = unset (append at the end); "root" = "" (insert first); else after that id."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    create = _create(item, **extra).create_item
    if expected is None:
        assert not create.HasField("previous_item_id")
    else:
        assert create.HasField("previous_item_id") and create.previous_item_id == expected


@pytest.mark.parametrize("role", ["user", "assistant", "system"])
@pytest.mark.parametrize("part", ["input_text", "text", "output_text"])
def test_every_role_takes_every_text_part(role: str, part: str) -> None:
    item = {"type": "message", "role": role, "content": [{"type": part, "text": "hello"}]}
    made = _create(item).create_item.item
    assert (made.role, made.content[0].type, made.content[0].text) == (role, part, "hello")


def test_item_create_function_call_output_from_the_reference() -> None:
    made = _create(
        {"type": "function_call_output", "call_id": "call_7d1f", "output": '{"temperature_c": 24}'}
    ).create_item.item
    assert made == cpb.Item(
        type="function_call_output", call_id="call_7d1f", output='{"temperature_c": 24}'
    )


def test_item_create_function_call_as_openai_shapes_it() -> None:
    """A tool call of the client's history (LiveKit syncs its chat context so)."""
    item = _create(
        {
            "type": "function_call",
            "name": "get_weather",
            "call_id": "call_7d1f",
            "arguments": '{"city":"Hong Kong"}',
        }
    ).create_item.item
    assert item == cpb.Item(
        type="function_call",
        name="get_weather",
        call_id="call_7d1f",
        arguments='{"city":"Hong Kong"}',
    )
    # OpenAI's call_id is optional: the session names one.
    bare = _create({"type": "function_call", "name": "f", "arguments": ""}).create_item.item
    assert bare.call_id == ""


def test_item_create_keeps_a_client_item_id() -> None:
    item = {
        "id": "item_mine",
        "type": "message",
        "role": "system",
        "content": [{"type": "input_text", "text": "Be terse."}],
    }
    assert _create(item).create_item.item.id == "item_mine"


def test_item_create_input_audio_is_decoded_to_pcm16_in_the_session_format() -> None:
    pcm = client.sine(8000, 800)
    ulaw = g711.pcm16_to_ulaw(pcm)
    t = Translator()
    t.translate(client.update({"input_audio_format": "g711_ulaw"}))
    part = {"type": "input_audio", "audio": client.b64(ulaw), "transcript": "hello"}
    made = t.translate(
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [part]},
        }
    ).create_item.item.content[0]
    assert made.type == "input_audio"
    assert made.audio == g711.ulaw_to_pcm16(ulaw) and made.sample_rate_hz == 8000
    assert made.transcript == "hello"
    # PCM16 (the default) passes through; 0 = the session's input rate.
    only_audio = {"type": "input_audio", "audio": client.b64(pcm)}
    item = {"type": "message", "role": "user", "content": [only_audio]}
    plain = _create(item).create_item.item.content[0]
    assert (plain.audio, plain.sample_rate_hz, plain.transcript) == (pcm, 0, "")
    only_text = {"type": "input_audio", "transcript": "said"}
    item = {"type": "message", "role": "user", "content": [only_text]}
    assert _create(item).create_item.item.content[0].transcript == "said"


_USER_TEXT = [{"type": "input_text", "text": "x"}]


@pytest.mark.parametrize(
    ("event", "code", "param"),
    [
        ({}, "missing_required_parameter", "item"),
        ({"item": "text"}, "invalid_value", "item"),
        (
            {"item": {"role": "user", "content": _USER_TEXT}},
            "missing_required_parameter",
            "item.type",
        ),
        ({"item": {"type": "image", "role": "user"}}, "invalid_value", "item.type"),
        ({"item": {"type": "function_call_result"}}, "invalid_value", "item.type"),
        (
            {"item": {"type": "function_call", "arguments": "{}"}},
            "missing_required_parameter",
            "item.name",
        ),
        (
            {"item": {"type": "function_call", "name": "f"}},
            "missing_required_parameter",
            "item.arguments",
        ),
        (
            {"item": {"type": "function_call", "name": "f", "arguments": {"a": 1}}},
            "invalid_value",
            "item.arguments",
        ),
        (
            {"item": {"type": "function_call", "name": "f", "arguments": "", "call_id": 7}},
            "invalid_value",
            "item.call_id",
        ),
        (
            {"item": {"type": "message", "content": _USER_TEXT}},
            "missing_required_parameter",
            "item.role",
        ),
        (
            {"item": {"type": "message", "role": "tool", "content": _USER_TEXT}},
            "invalid_value",
            "item.role",
        ),
        (
            {"item": {"type": "message", "role": "user"}},
            "missing_required_parameter",
            "item.content",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": []}},
            "invalid_value",
            "item.content",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": "hi"}},
            "invalid_value",
            "item.content",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": ["hi"]}},
            "invalid_value",
            "item.content[0]",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": [{"text": "x"}]}},
            "missing_required_parameter",
            "item.content[0].type",
        ),
        (
            {
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [*_USER_TEXT, {"type": "input_text"}],
                }
            },
            "missing_required_parameter",
            "item.content[1].text",
        ),
        (
            {
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": 3}],
                }
            },
            "invalid_value",
            "item.content[0].text",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": [{"type": "input_image"}]}},
            "invalid_value",
            "item.content[0].type",
        ),
        (
            {
                "item": {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "input_audio", "transcript": "x"}],
                }
            },
            "invalid_value",
            "item.content[0].type",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": [{"type": "input_audio"}]}},
            "missing_required_parameter",
            "item.content[0].audio",
        ),
        (
            {
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_audio", "audio": "!!"}],
                }
            },
            "invalid_audio",
            "item.content[0].audio",
        ),
        (
            {
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_audio", "audio": client.b64(b"\0")}],
                }
            },
            "invalid_audio",
            "item.content[0].audio",
        ),
        (
            {"item": {"type": "function_call_output", "output": "{}"}},
            "missing_required_parameter",
            "item.call_id",
        ),
        (
            {"item": {"type": "function_call_output", "call_id": "", "output": "{}"}},
            "invalid_value",
            "item.call_id",
        ),
        (
            {"item": {"type": "function_call_output", "call_id": "c"}},
            "missing_required_parameter",
            "item.output",
        ),
        (
            {"item": {"type": "function_call_output", "call_id": "c", "output": {"t": 1}}},
            "invalid_value",
            "item.output",
        ),
        (
            {"item": {"type": "function_call_output", "call_id": "c", "output": "", "id": 4}},
            "invalid_value",
            "item.id",
        ),
        (
            {
                "item": {"type": "function_call_output", "call_id": "c", "output": ""},
                "previous_item_id": 4,
            },
            "invalid_value",
            "previous_item_id",
        ),
        (
            {
                "item": {"type": "function_call_output", "call_id": "c", "output": ""},
                "previous_item_id": "",
            },
            "invalid_value",
            "previous_item_id",
        ),
    ],
)
def test_bad_item_create_is_one_typed_error(event: dict[str, Any], code: str, param: str) -> None:
    err = client.refused({"type": "conversation.item.create", "event_id": "evt_i", **event})
    assert (err.code, err.param, err.type) == (code, param, "invalid_request_error")


@pytest.mark.parametrize(
    ("etype", "kind"),
    [("conversation.item.retrieve", "retrieve_item"), ("conversation.item.delete", "delete_item")],
)
def test_item_retrieve_and_delete_name_the_item(etype: str, kind: str) -> None:
    cmd = Translator().translate({"type": etype, "item_id": "item_resp_01"})
    assert getattr(cmd, kind) == spb.ItemRef(item_id="item_resp_01")
    for event, code in (
        ({}, "missing_required_parameter"),
        ({"item_id": ""}, "invalid_value"),
        ({"item_id": 9}, "invalid_value"),
    ):
        err = client.refused({"type": etype, **event})
        assert (err.code, err.param) == (code, "item_id")


def test_item_truncate_from_the_reference() -> None:
    cmd = Translator().translate(
        {
            "type": "conversation.item.truncate",
            "item_id": "item_resp_01",
            "content_index": 0,
            "audio_end_ms": 1850,
        }
    )
    assert cmd.truncate_item == spb.TruncateItem(
        item_id="item_resp_01", content_index=0, audio_end_ms=1850
    )


_TRUNCATE = {"item_id": "item_1", "content_index": 0, "audio_end_ms": 10}


@pytest.mark.parametrize(
    ("change", "code", "param"),
    [
        ({"item_id": None}, "missing_required_parameter", "item_id"),
        ({"content_index": None}, "missing_required_parameter", "content_index"),
        ({"audio_end_ms": None}, "missing_required_parameter", "audio_end_ms"),
        ({"content_index": -1}, "invalid_value", "content_index"),
        ({"content_index": 1.0}, "invalid_value", "content_index"),
        ({"content_index": True}, "invalid_value", "content_index"),
        ({"content_index": INT32_MAX + 1}, "invalid_value", "content_index"),
        ({"audio_end_ms": -5}, "invalid_value", "audio_end_ms"),
        ({"audio_end_ms": "1850"}, "invalid_value", "audio_end_ms"),
        ({"audio_end_ms": 2**63}, "invalid_value", "audio_end_ms"),
    ],
)
def test_bad_item_truncate_is_one_typed_error(
    change: dict[str, Any], code: str, param: str
) -> None:
    event = {"type": "conversation.item.truncate", **_TRUNCATE, **change}
    event = {k: v for k, v in event.items() if v is not None}
    err = client.refused(event)
    assert (err.code, err.param) == (code, param)
