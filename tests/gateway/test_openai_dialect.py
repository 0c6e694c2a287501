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

from antiphon.gateway import openai_dialect as od
from antiphon.gateway.dialect import DUPLEX, NATIVE, OPENAI, realtime_dialect
from antiphon.gateway.openai_dialect import project_openai
from antiphon.gateway.projector import project
from antiphon.gateway.translator import Translator
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.support import openai_models
from tests.support.protos import with_fields

KINDS = [f.name for f in spb.ServerEvent.DESCRIPTOR.oneofs_by_name["kind"].fields]
REF = spb.PartRef(response_id="resp_01", item_id="item_resp_01", output_index=0, content_index=0)
FC_REF = spb.PartRef(response_id="resp_fc_01", item_id="item_fc_01", output_index=0)
SERVER_VAD = cpb.TurnDetection(
    mode=cpb.TURN_DETECTION_MODE_SERVER_VAD,
    threshold=0.5,
    prefix_padding_ms=300,
    silence_duration_ms=500,
    create_response=True,
    interrupt_response=True,
)


def _event(kind: str, body: Message | None = None) -> spb.ServerEvent:
    ev = spb.ServerEvent(seq=7, event_id=f"event_{kind}")
    if body is None:
        getattr(ev, kind).SetInParent()
    else:
        getattr(ev, kind).CopyFrom(body)
    return ev


def _frame(kind: str, body: Message | None = None) -> dict[str, Any]:
    frame = project_openai(_event(kind, body))
    assert frame is not None, kind
    return frame


def _state(**config: Any) -> spb.SessionState:
    cfg = cpb.SessionConfig(
        model="antiphon-cascade",
        instructions="Be brief.",
        voice="joe",
        output_modalities=["audio"],
        input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
        output_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
        turn_detection=SERVER_VAD,
        overlap_policy="listen_only",
        playback_commit_policy="ack_only",
        resumable=True,
    )
    return spb.SessionState(
        config=with_fields(cfg, **config),
        session_id="sess_demo_01",
        incarnation=2,
        attachment_generation=3,
        resume_token="rt_3f9c",
        epoch=4,
        state="open",
        capabilities=cpb.Capabilities(implementation_level="cascade", supports_barge_in=True),
    )


def _assistant(status: str = "completed", part: str = "output_audio") -> cpb.Item:
    content = cpb.ContentPart(type=part, transcript="It is sunny.")
    if part in ("text", "output_text"):
        content = cpb.ContentPart(type=part, text="It is sunny.")
    return cpb.Item(
        id="item_resp_01", type="message", role="assistant", status=status, content=[content]
    )


def _user(part: cpb.ContentPart) -> cpb.Item:
    return cpb.Item(id="item_9b2d", type="message", role="user", status="completed", content=[part])


def _function_call() -> cpb.Item:
    return cpb.Item(
        id="item_fc_01",
        type="function_call",
        status="completed",
        name="get_weather",
        call_id="call_7d1f",
        arguments='{"city":"Hong Kong"}',
    )


def _response(status: str, reason: str = "", **fields: Any) -> spb.Response:
    return spb.Response(
        id="resp_01",
        status=status,
        status_reason=reason,
        output=[_assistant("completed" if status == "completed" else "incomplete")],
        output_modalities=["audio"],
        epoch=2,
        turn_id=1,
        session_id="sess_demo_01",
        committed=status == "completed",
        playback=cpb.Playback(generated_ms=2400, sent_ms=2400),
        has_stage_metrics=True,
        stage_metrics=cpb.StageMetrics(ttft_ms=12.0, prompt="p"),
        **fields,
    )


# One or more typed events of every kind OpenAI has an event for, in every
# shape its fields can take here.
CASES: list[tuple[str, Message | None]] = [
    ("session_created", _state()),
    ("session_updated", _state()),
    ("session_updated", _state(turn_detection=cpb.TurnDetection())),
    (
        "session_updated",
        _state(
            turn_detection=cpb.TurnDetection(
                mode=cpb.TURN_DETECTION_MODE_SEMANTIC_VAD,
                eagerness="high",
                create_response=True,
                interrupt_response=False,
            )
        ),
    ),
    (
        "session_updated",
        _state(
            input_audio_format=cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000),
            output_audio_format=cpb.AudioFormat(encoding="g711_alaw", sample_rate_hz=8000),
        ),
    ),
    (
        "session_updated",
        _state(input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=16000)),
    ),
    (
        "session_updated",
        _state(input_audio_format=cpb.AudioFormat(encoding="pcm_f32le", sample_rate_hz=24000)),
    ),
    ("session_updated", _state(max_output_tokens=256, output_modalities=["text"])),
    ("error", spb.ErrorEvent(type="invalid_request_error", code="invalid_value", message="m")),
    (
        "error",
        spb.ErrorEvent(
            type="invalid_request_error",
            code="item_not_found",
            message="m",
            event_id="evt_1",
            param="item_id",
            client_type="conversation.item.retrieve",
        ),
    ),
    ("speech_started", spb.SpeechStarted(audio_start_ms=10, item_id="item_9b2d")),
    ("speech_stopped", spb.SpeechStopped(audio_end_ms=900, item_id="item_9b2d")),
    (
        "input_committed",
        spb.InputCommitted(item_id="item_9b2d", turn_id=1, epoch=2, response_create_deferred=True),
    ),
    ("input_committed", spb.InputCommitted(previous_item_id="item_a", item_id="item_9b2d")),
    ("input_cleared", None),
    ("input_cancelled", spb.InputCancelled(session_id="sess_demo_01", epoch=3)),
    ("item_added", spb.ItemEvent(item=_user(cpb.ContentPart(type="input_audio")))),
    ("item_created", spb.ItemEvent(item=_user(cpb.ContentPart(type="text", text="Hi")))),
    (
        "item_done",
        spb.ItemEvent(
            previous_item_id="item_9b2d",
            item=_user(cpb.ContentPart(type="input_audio", transcript="what is it")),
        ),
    ),
    ("item_done", spb.ItemEvent(item=_assistant())),
    ("item_done", spb.ItemEvent(item=_assistant(part="text"))),
    (
        "item_added",
        spb.ItemEvent(
            item=cpb.Item(
                id="item_s",
                type="message",
                role="system",
                status="completed",
                content=[cpb.ContentPart(type="output_text", text="Be kind.")],
            )
        ),
    ),
    ("item_added", spb.ItemEvent(item=_function_call())),
    (
        "item_added",
        spb.ItemEvent(
            item=cpb.Item(
                id="item_fo",
                type="function_call_output",
                status="completed",
                call_id="call_7d1f",
                output="{}",
            )
        ),
    ),
    (
        "transcription_completed",
        spb.TranscriptionCompleted(item_id="item_9b2d", transcript="hi"),
    ),
    ("response_created", spb.ResponseEvent(response=_response("in_progress", metadata={}))),
    (
        "response_created",
        spb.ResponseEvent(response=_response("in_progress", metadata={"client_event_id": "evt_9"})),
    ),
    ("response_done", spb.ResponseEvent(response=_response("completed"))),
    *[
        ("response_done", spb.ResponseEvent(response=_response("cancelled", reason)))
        for reason in [*sorted(od.REASONS), "idle_ttl_expired", ""]
    ],
    ("response_done", spb.ResponseEvent(response=_response("failed", "stage0_unavailable"))),
    ("response_done", spb.ResponseEvent(response=_response("incomplete", "max_output_tokens"))),
    (
        "output_item_added",
        spb.OutputItemEvent(response_id="resp_01", item=_assistant("in_progress")),
    ),
    ("output_item_done", spb.OutputItemEvent(response_id="resp_01", item=_assistant())),
    ("content_part_added", spb.ContentPartEvent(ref=REF, part=cpb.ContentPart(type="audio"))),
    (
        "content_part_done",
        spb.ContentPartEvent(ref=REF, part=cpb.ContentPart(type="text", text="It is sunny.")),
    ),
    (
        "audio_delta",
        spb.AudioDelta(
            ref=REF,
            audio=b"\x01\x00" * 4,
            marks=[cpb.AudioTextMark(text_chars=2, audio_end_ms=100)],
            format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
        ),
    ),
    ("audio_transcript_delta", spb.TextDelta(ref=REF, delta="It")),
    ("text_delta", spb.TextDelta(ref=REF, delta="It")),
    ("audio_done", spb.PartDone(ref=REF)),
    ("audio_transcript_done", spb.TextDone(ref=REF, text="It is sunny.")),
    ("text_done", spb.TextDone(ref=REF, text="It is sunny.")),
    ("rate_limits_updated", None),
    ("item_deleted", spb.ItemDeleted(item_id="item_9b2d")),
    ("item_retrieved", spb.ItemRetrieved(item=_assistant())),
    (
        "item_truncated",
        spb.ItemTruncated(
            item_id="item_resp_01", content_index=0, audio_end_ms=1850, transcript="It is"
        ),
    ),
    ("output_audio_cleared", spb.OutputAudioCleared(response_id="resp_01")),
    ("output_audio_cleared", spb.OutputAudioCleared()),
    (
        "function_call_arguments_delta",
        spb.FunctionCallArguments(ref=FC_REF, call_id="call_7d1f", arguments='{"city":'),
    ),
    (
        "function_call_arguments_done",
        spb.FunctionCallArguments(
            ref=FC_REF, call_id="call_7d1f", name="get_weather", arguments='{"city":"HK"}'
        ),
    ),
    *[(kind, None) for kind in sorted(od.ENDINGS)],
]


# ------------------------------------------------------------- the surface
def test_every_kind_is_sent_not_sent_or_told_as_an_error() -> None:
    """A new oneof kind fails here until this dialect says what it makes of it."""
    sent = {kind for kind in KINDS if kind not in od.NOT_SENT}
    assert od.NOT_SENT <= set(KINDS) and set(od.ENDINGS) <= sent
    assert sent == {kind for kind, _ in CASES}
    # Every wire type sent is OpenAI's, and has its fields listed or its own shape.
    for kind in sent - set(od.ENDINGS):
        wire = project(_event(kind))["type"]
        assert wire in openai_models.SERVER_MODELS, kind
        assert wire in od.FIELDS or kind in od._SHAPES, kind


@pytest.mark.parametrize(
    ("kind", "body"), CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)]
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
    assert project_openai(_event(kind)) is None
    # The duplex dialect sends each of them.
    assert project(_event(kind))["type"] not in openai_models.SERVER_MODELS


def test_the_client_types_are_openai_s() -> None:
    assert od.CLIENT_TYPES == openai_models.CLIENT_TYPES


def test_the_route_picks_the_dialect_by_the_duplex_opt_in() -> None:
    assert realtime_dialect({}) is OPENAI
    assert realtime_dialect({"duplex": "0"}) is OPENAI
    assert realtime_dialect({"duplex": "1"}) is DUPLEX
    assert realtime_dialect({"duplex": "true"}) is DUPLEX
    assert OPENAI.opens_on_connect and OPENAI.client_types == od.CLIENT_TYPES
    assert not DUPLEX.opens_on_connect and DUPLEX.client_types is None
    assert not NATIVE.opens_on_connect and NATIVE.client_types is None


def test_extension_client_events_are_refused_and_openai_s_taken() -> None:
    translator = Translator(OPENAI.client_types)
    for etype in ("session.heartbeat", "playback.ack", "barge_in", "session.close", "push_chunk"):
        with pytest.raises(Exception) as info:
            translator.translate({"type": etype})
        assert getattr(info.value, "code", None) == "invalid_value"
    cmd = translator.translate({"type": "response.create", "response": {"instructions": None}})
    assert cmd.WhichOneof("kind") == "create_response"


# ----------------------------------------------------------------- session
def test_session_created_is_openai_s_ga_session_with_no_resume_token() -> None:
    frame = _frame("session_created", _state())
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
        _state(input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=16000)),
    )
    assert frame["session"]["audio"]["input"]["format"] == {"type": "audio/pcm"}


# --------------------------------------------------------------- responses
def test_response_metadata_is_the_client_s_own_map_echoed() -> None:
    """LiveKit waits for a `response.created` whose metadata echoes its request."""
    r = _response("in_progress", metadata={"client_event_id": "evt_9"})
    created = _frame("response_created", spb.ResponseEvent(response=r))
    assert set(created) == {"type", "event_id", "response"}  # no top-level response_id
    assert created["response"]["metadata"] == {"client_event_id": "evt_9"}
    done = _frame("response_done", spb.ResponseEvent(response=_response("completed")))
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
    r = _response("cancelled", reason)
    details = _frame("response_done", spb.ResponseEvent(response=r))["response"]["status_details"]
    assert details == {"type": "cancelled", "reason": openai_reason}
    # The duplex dialect keeps the finer reason.
    assert project(_event("response_done", spb.ResponseEvent(response=r)))["response"][
        "status_details"
    ] == {"type": "cancelled", "reason": reason}


def test_a_failed_response_names_its_cause_in_the_error() -> None:
    r = _response("failed", "stage0_unavailable")
    details = _frame("response_done", spb.ResponseEvent(response=r))["response"]["status_details"]
    assert details == {
        "type": "failed",
        "error": {"type": "server_error", "code": "stage0_unavailable"},
    }


def test_items_carry_openai_s_part_types_for_their_role() -> None:
    user = _frame(
        "item_created", spb.ItemEvent(item=_user(cpb.ContentPart(type="text", text="Hi")))
    )
    assert user["item"]["content"] == [{"type": "input_text", "text": "Hi"}]
    assistant = _frame("item_done", spb.ItemEvent(item=_assistant(part="text")))
    assert assistant["item"]["content"] == [{"type": "output_text", "text": "It is sunny."}]
    call = _frame("item_added", spb.ItemEvent(item=_function_call()))["item"]
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
        ref=REF, audio=b"\x01\x00", format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000)
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
        spb.FunctionCallArguments(ref=FC_REF, call_id="c", name="get_weather", arguments="{}"),
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
    assert project(_event("error", e))["error"]["code"] == code


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
    item = _user(cpb.ContentPart(type="input_audio"))
    item.id = item_id
    out = []
    for kind in kinds:
        if kind == "input_committed":
            out.append(_event(kind, spb.InputCommitted(item_id=item_id)))
        else:
            out.append(_event(kind, spb.ItemEvent(item=item)))
    return out


def _run(events: list[spb.ServerEvent]) -> list[str]:
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
    project_socket = OPENAI.projector()
    (frame,) = project_socket(_event("item_added", spb.ItemEvent(item=_assistant("in_progress"))))
    assert frame["type"] == "conversation.item.added"
