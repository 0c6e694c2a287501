"""OpenAI's dialect (`/v1/realtime`, no opt-in): every frame is exactly OpenAI's.

Each typed event is sent in OpenAI's shape (valid under the `openai` SDK's
models in strict mode, with no field the SDK does not declare but those
OpenAI itself sends), not sent at all, or told as OpenAI's `error` when it
ends the socket's session. `tests/support/openai_models.py` is the judge.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf.message import Message

from antiphon.gateway.dialects import openai_dialect as od
from antiphon.gateway.dialects.dialect import DUPLEX, OPENAI
from antiphon.gateway.dialects.openai_dialect import project_openai
from antiphon.gateway.dialects.projector import project
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.gateway import server_events as server
from tests.support import openai_models


def _frame(kind: str, body: Message | None = None) -> dict[str, Any]:
    frame = project_openai(server.event(kind, body))
    assert frame is not None, kind
    return frame


# ------------------------------------------------------------- the surface
def test_every_kind_is_sent_not_sent_or_told_as_an_error() -> None:
    """A new oneof kind fails here until this dialect says what it makes of it."""
    sent = {kind for kind in server.KINDS if kind not in od.NOT_SENT}
    assert set(od.NOT_SENT) <= set(server.KINDS) and set(od.ENDINGS) <= sent
    assert sent == {kind for kind, _ in server.OPENAI_CASES}
    # Every wire type sent is OpenAI's, under the name the duplex dialect gives it.
    for kind in sent - set(od.ENDINGS):
        wire = project(server.event(kind))["type"]
        assert wire in openai_models.SERVER_MODELS, kind
        assert _frame(kind)["type"] == wire, kind


@pytest.mark.parametrize(
    ("kind", "body"),
    server.OPENAI_CASES,
    ids=[f"{k}-{i}" for i, (k, _) in enumerate(server.OPENAI_CASES)],
)
def test_every_frame_validates_strictly_with_no_undeclared_field(
    kind: str, body: Message | None
) -> None:
    frame = _frame(kind, body)
    assert openai_models.violations(frame) == []
    assert frame["event_id"] == f"event_{kind}"
    json.dumps(frame)  # plain JSON


@pytest.mark.parametrize("kind", sorted(od.NOT_SENT))
def test_duplex_only_events_are_not_sent(kind: str) -> None:
    """`response.speak`, `response.listen`, `overlap.decision`, `playback.acknowledged`, ..."""
    assert project_openai(server.event(kind)) is None
    # The duplex dialect sends each of them.
    assert project(server.event(kind))["type"] not in openai_models.SERVER_MODELS


def test_the_client_types_are_openai_s() -> None:
    assert od.CLIENT_TYPES == openai_models.CLIENT_TYPES


# ----------------------------------------------------------------- session
def test_session_created_is_openai_s_ga_session_with_no_resume_token() -> None:
    frame = _frame("session_created", server.openai_state())
    assert set(frame) == {"type", "event_id", "session"}  # no seq, token, incarnation
    assert frame["session"] == {
        "type": "realtime",
        "object": "realtime.session",
        "id": "sess_demo_01",
        "model": "antiphon-cascade",
        "output_modalities": ["audio"],
        "instructions": "Be brief.",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "turn_detection": {
                    "type": "server_vad",
                    "threshold": 0.5,
                    "prefix_padding_ms": 300,
                    "silence_duration_ms": 500,
                    "create_response": True,
                    "interrupt_response": True,
                },
            },
            "output": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "voice": "joe",
                "speed": 1.0,
            },
        },
        "truncation": "auto",
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": "inf",
    }


def test_a_rate_openai_cannot_name_leaves_the_rate_out() -> None:
    """OpenAI's `audio/pcm` is 24 kHz only: a 16 kHz session does not claim 24."""
    frame = _frame(
        "session_updated",
        server.openai_state(
            input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=16000)
        ),
    )
    assert frame["session"]["audio"]["input"]["format"] == {"type": "audio/pcm"}


# --------------------------------------------------------------- responses
def test_response_metadata_is_the_client_s_own_map_echoed() -> None:
    """LiveKit waits for a `response.created` whose metadata echoes its request."""
    r = server.openai_response("in_progress", metadata={"client_event_id": "evt_9"})
    created = _frame("response_created", spb.ResponseEvent(response=r))
    assert set(created) == {"type", "event_id", "response"}  # no top-level response_id
    assert created["response"]["metadata"] == {"client_event_id": "evt_9"}
    done = _frame("response_done", spb.ResponseEvent(response=server.openai_response("completed")))
    assert done["response"]["metadata"] is None
    assert done["response"]["status_details"] is None


@pytest.mark.parametrize(
    ("reason", "openai_reason"),
    [
        ("barge_in", "turn_detected"),
        ("client_cancelled", "client_cancelled"),
        ("output_audio_cleared", "client_cancelled"),
        ("input_cancelled", "client_cancelled"),
        ("session_closed", "client_cancelled"),
        ("client_disconnected", "client_cancelled"),
        ("idle_ttl_expired", None),
    ],
)
def test_cancellation_reasons_are_openai_s_four(reason: str, openai_reason: str | None) -> None:
    r = server.openai_response("cancelled", reason)
    details = _frame("response_done", spb.ResponseEvent(response=r))["response"]["status_details"]
    assert details == {"type": "cancelled", "reason": openai_reason}
    # The duplex dialect keeps the finer reason.
    assert project(server.event("response_done", spb.ResponseEvent(response=r)))["response"][
        "status_details"
    ] == {"type": "cancelled", "reason": reason}


def test_a_failed_response_names_its_cause_in_the_error() -> None:
    r = server.openai_response("failed", "stage0_unavailable")
    details = _frame("response_done", spb.ResponseEvent(response=r))["response"]["status_details"]
    assert details == {
        "type": "failed",
        "error": {"type": "server_error", "code": "stage0_unavailable"},
    }


def test_items_carry_openai_s_part_types_for_their_role() -> None:
    user = _frame(
        "item_created",
        spb.ItemEvent(item=server.user_item(cpb.ContentPart(type="text", text="Hi"))),
    )
    assert user["item"]["content"] == [{"type": "input_text", "text": "Hi"}]
    assistant = _frame("item_done", spb.ItemEvent(item=server.assistant_item(part="text")))
    assert assistant["item"]["content"] == [{"type": "output_text", "text": "It is sunny."}]
    call = _frame("item_added", spb.ItemEvent(item=server.function_call()))["item"]
    assert call == {
        "id": "item_fc_01",
        "object": "realtime.item",
        "type": "function_call",
        "status": "completed",
        "name": "get_weather",
        "call_id": "call_7d1f",
        "arguments": '{"city":"Hong Kong"}',
    }


def test_audio_deltas_carry_only_openai_s_fields() -> None:
    delta = spb.AudioDelta(
        ref=server.REF,
        audio=b"\x01\x00",
        format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
    )
    frame = _frame("audio_delta", delta)
    assert set(frame) == {
        "type",
        "event_id",
        "response_id",
        "item_id",
        "output_index",
        "content_index",
        "delta",
    }


def test_function_call_arguments_done_names_the_function() -> None:
    frame = _frame(
        "function_call_arguments_done",
        spb.FunctionCallArguments(
            ref=server.FC_REF, call_id="c", name="get_weather", arguments="{}"
        ),
    )
    assert (frame["name"], frame["arguments"], frame["call_id"]) == ("get_weather", "{}", "c")


# ------------------------------------------------------------------- input
def test_committed_carries_its_item_id_and_no_duplex_event() -> None:
    frame = _frame("input_committed", spb.InputCommitted(item_id="item_9b2d", epoch=2))
    assert frame == {
        "type": "input_audio_buffer.committed",
        "event_id": "event_input_committed",
        "previous_item_id": None,
        "item_id": "item_9b2d",
    }


def test_transcription_usage_is_openai_s_full_shape() -> None:
    frame = _frame(
        "transcription_completed", spb.TranscriptionCompleted(item_id="i", transcript="x")
    )
    assert frame["content_index"] == 0
    assert frame["usage"]["input_token_details"] == {"audio_tokens": 0, "text_tokens": 0}


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    ("code", "client_type", "openai_code"),
    [
        (
            "input_audio_buffer_empty",
            "input_audio_buffer.commit",
            "input_audio_buffer_commit_empty",
        ),
        ("item_not_found", "conversation.item.retrieve", "item_retrieve_invalid_item_id"),
        ("item_not_found", "conversation.item.delete", "item_delete_invalid_item_id"),
        ("item_not_found", "conversation.item.truncate", "item_truncate_invalid_item_id"),
        ("item_not_found", "conversation.item.create", "item_not_found"),
        (
            "conversation_already_has_active_response",
            "",
            "conversation_already_has_active_response",
        ),
    ],
)
def test_error_codes_are_openai_s_where_openai_names_the_refusal(
    code: str, client_type: str, openai_code: str
) -> None:
    e = spb.ErrorEvent(
        type="invalid_request_error", code=code, message="m", client_type=client_type
    )
    assert _frame("error", e)["error"] == {
        "type": "invalid_request_error",
        "code": openai_code,
        "message": "m",
        "param": None,
        "event_id": None,
    }
    # The duplex dialect keeps its own code.
    assert project(server.event("error", e))["error"]["code"] == code


@pytest.mark.parametrize(
    ("kind", "body", "code"),
    [
        ("session_expired", spb.SessionExpired(reason="idle_ttl_expired"), "session_expired"),
        ("session_replaced", spb.SessionReplaced(), "session_replaced"),
        ("resync_required", spb.ResyncRequired(reason="journal_gap"), "session_resync_required"),
    ],
)
def test_an_ending_of_the_session_is_told_as_an_error(kind: str, body: Message, code: str) -> None:
    error = _frame(kind, body)
    assert error["type"] == "error"
    assert error["error"]["code"] == code


# ------------------------------------------------------------------- order
def _user_item_events(kinds: tuple[str, ...], item_id: str = "item_9b2d") -> list[spb.ServerEvent]:
    item = server.user_item(cpb.ContentPart(type="input_audio"))
    item.id = item_id
    out = []
    for kind in kinds:
        if kind == "input_committed":
            out.append(server.event(kind, spb.InputCommitted(item_id=item_id)))
        else:
            out.append(server.event(kind, spb.ItemEvent(item=item)))
    return out


def _run(events: list[spb.ServerEvent]) -> list[str]:
    assert OPENAI.projector is not None
    project_socket = OPENAI.projector()
    return [f["type"] for ev in events for f in project_socket(ev)]


def test_a_committed_user_item_is_added_after_its_commit_as_openai_orders_it() -> None:
    """The session sends added, created, committed (the reference's order);
    OpenAI's committed comes first: it names "the item that will be created"."""
    sent = _run(_user_item_events(("item_added", "item_created", "input_committed", "item_done")))
    assert sent == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.created",
        "conversation.item.done",
    ]
    # The duplex dialect keeps the reference's order.
    assert DUPLEX.projector is not None
    duplex = DUPLEX.projector()
    kinds = ("item_added", "item_created", "input_committed")
    assert [f["type"] for ev in _user_item_events(kinds) for f in duplex(ev)] == [
        "conversation.item.added",
        "conversation.item.created",
        "input_audio_buffer.committed",
    ]


def test_a_created_user_item_keeps_its_order() -> None:
    """`conversation.item.create`: no commit follows, nothing is reordered or lost."""
    assert _run(_user_item_events(("item_added", "item_created", "item_done"))) == [
        "conversation.item.added",
        "conversation.item.created",
        "conversation.item.done",
    ]
    # An assistant item is never held.
    assert OPENAI.projector is not None
    project_socket = OPENAI.projector()
    (frame,) = project_socket(
        server.event("item_added", spb.ItemEvent(item=server.assistant_item("in_progress")))
    )
    assert frame["type"] == "conversation.item.added"
