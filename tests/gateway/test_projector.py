"""Typed ServerEvent -> Realtime JSON: wire names, envelope, and the documented shapes."""

from __future__ import annotations

import base64
import json
import typing
from typing import Any, cast

import pytest
from google.protobuf.message import Message
from openai._models import construct_type_unchecked
from openai.types.realtime import RealtimeServerEvent
from openai.types.realtime.realtime_audio_input_turn_detection import SemanticVad

from antiphon.gateway.projector import project
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.support import reference
from tests.support.protos import with_fields

# The server->client catalogue of reference/realtime-duplex-api.md, read from it.
REFERENCE_SERVER_TYPES = set(reference.server_types())

# ServerEvent oneof field -> the wire type the reference names for it.
WIRE_TYPE = {
    "session_created": "session.created",
    "session_updated": "session.updated",
    "session_closed": "session.closed",
    "heartbeat_ack": "session.heartbeat_ack",
    "session_resumed": "session.resumed",
    "session_replaced": "session.replaced",
    "session_expired": "session.expired",
    "resync_required": "session.resync_required",
    "error": "error",
    "speech_started": "input_audio_buffer.speech_started",
    "speech_stopped": "input_audio_buffer.speech_stopped",
    "input_committed": "input_audio_buffer.committed",
    "input_cleared": "input_audio_buffer.cleared",
    "item_added": "conversation.item.added",
    "item_created": "conversation.item.created",
    "item_done": "conversation.item.done",
    "transcription_completed": "conversation.item.input_audio_transcription.completed",
    "response_created": "response.created",
    "output_item_added": "response.output_item.added",
    "content_part_added": "response.content_part.added",
    "response_speak": "response.speak",
    "audio_delta": "response.output_audio.delta",
    "audio_transcript_delta": "response.output_audio_transcript.delta",
    "text_delta": "response.output_text.delta",
    "audio_done": "response.output_audio.done",
    "audio_transcript_done": "response.output_audio_transcript.done",
    "text_done": "response.output_text.done",
    "content_part_done": "response.content_part.done",
    "output_item_done": "response.output_item.done",
    "response_done": "response.done",
    "rate_limits_updated": "rate_limits.updated",
    "response_listen": "response.listen",
    "item_deleted": "conversation.item.deleted",
    "item_retrieved": "conversation.item.retrieved",
    "item_truncated": "conversation.item.truncated",
    "output_audio_cleared": "output_audio_buffer.cleared",
    "playback_acknowledged": "playback.acknowledged",
    "overlap_decision": "overlap.decision",
    # The reference projects the native `input.cancelled` as `input_audio_buffer.cleared`.
    "input_cancelled": "input_audio_buffer.cleared",
    "function_call_arguments_delta": "response.function_call_arguments.delta",
    "function_call_arguments_done": "response.function_call_arguments.done",
    # The raw fallback of a malformed model call.
    "function_call_malformed": "duplex.function_call.done",
}
# Wire names more than one kind projects to, each by the reference's name map.
SHARED_WIRE_TYPES = {"input_audio_buffer.cleared": {"input_cleared", "input_cancelled"}}

# Duplex-only (tier 3) kinds: no OpenAI model exists for them.
TIER3_KINDS = {
    "session_closed",
    "heartbeat_ack",
    "response_speak",
    "response_listen",
    "session_resumed",
    "session_replaced",
    "session_expired",
    "resync_required",
    "playback_acknowledged",
    "overlap_decision",
    "function_call_malformed",
}

KINDS = [f.name for f in spb.ServerEvent.DESCRIPTOR.oneofs_by_name["kind"].fields]

REF = spb.PartRef(response_id="resp_01", item_id="item_resp_01", output_index=0, content_index=0)
FC_REF = spb.PartRef(response_id="resp_fc_01", item_id="item_fc_01", output_index=0)


def _event(kind: str, body: Message | None = None, *, seq: int = 7) -> spb.ServerEvent:
    ev = spb.ServerEvent(seq=seq, event_id=f"event_{kind}")
    if body is None:
        getattr(ev, kind).SetInParent()
    else:
        getattr(ev, kind).CopyFrom(body)
    return ev


def _state(**config: Any) -> spb.SessionState:
    cfg = cpb.SessionConfig(
        model="antiphon-cascade",
        instructions="Be brief.",
        voice="joe",
        output_modalities=["audio", "text"],
        input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=16000),
        output_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
        turn_detection=cpb.TurnDetection(
            mode=cpb.TURN_DETECTION_MODE_SERVER_VAD,
            threshold=0.5,
            prefix_padding_ms=300,
            silence_duration_ms=500,
            create_response=True,
            interrupt_response=True,
        ),
        temperature=0.7,
        overlap_policy="listen_only",
        playback_commit_policy="ack_only",
        native_duplex=True,
        auto_response=True,
    )
    return spb.SessionState(
        config=with_fields(cfg, **config),
        session_id="sess_demo_01",
        incarnation=0,
        attachment_generation=1,
        resume_token="rt_3f9c",
        epoch=0,
        turn_id=0,
        state="open",
        capabilities=cpb.Capabilities(
            implementation_level="cascade",
            supports_input_append=True,
            chunk_period_ms=100,
            input_modes=["append_audio_chunk"],
        ),
    )


def _assistant_item(status: str = "completed") -> cpb.Item:
    return cpb.Item(
        id="item_resp_01",
        type="message",
        role="assistant",
        status=status,
        content=[cpb.ContentPart(type="output_audio", transcript="It is sunny.")],
    )


def _response(status: str = "completed", reason: str = "") -> spb.Response:
    return spb.Response(
        id="resp_01",
        status=status,
        status_reason=reason,
        output=[_assistant_item()],
        output_modalities=["audio"],
        epoch=2,
        turn_id=1,
        session_id="sess_demo_01",
        committed=True,
        playback=cpb.Playback(generated_ms=2400, sent_ms=2400, played_ms=1000, committed_ms=1000),
        metadata={"trace": "turn-3"},
    )


# ---------------------------------------------------------------- wire names
def test_every_server_event_kind_has_a_reference_wire_type() -> None:
    """A new oneof kind without a projection entry here fails this test."""
    assert set(KINDS) == set(WIRE_TYPE)
    assert set(WIRE_TYPE.values()) <= REFERENCE_SERVER_TYPES
    # Distinct kinds collapse onto one wire name only where the reference says so.
    by_wire: dict[str, set[str]] = {}
    for kind, wire in WIRE_TYPE.items():
        by_wire.setdefault(wire, set()).add(kind)
    assert {w: k for w, k in by_wire.items() if len(k) > 1} == SHARED_WIRE_TYPES


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_projects_to_its_wire_type_with_envelope(kind: str) -> None:
    wire = project(_event(kind, seq=41))
    assert wire["type"] == WIRE_TYPE[kind]
    assert wire["event_id"] == f"event_{kind}"
    assert wire["server_event_seq"] == 41
    # What the gateway writes is plain JSON (no bytes or protobuf values leak).
    json.dumps(wire)


def test_event_without_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        project(spb.ServerEvent(seq=1, event_id="event_x"))


# ------------------------------------------------------------------ session
@pytest.mark.parametrize("kind", ["session_created", "session_updated"])
def test_session_object_carries_beta_and_ga_spellings(kind: str) -> None:
    wire = project(_event(kind, _state()))
    assert (wire["incarnation"], wire["attachment_generation"]) == (0, 1)
    assert wire["resume_token"] == "rt_3f9c"
    s = wire["session"]
    assert s["object"] == "realtime.session"
    assert s["type"] == "realtime"
    assert s["id"] == "sess_demo_01"
    # Beta and GA spellings side by side.
    assert s["modalities"] == s["output_modalities"] == ["audio", "text"]
    assert s["input_audio_format"] == "pcm16"
    assert s["output_audio_format"] == "pcm16"
    assert s["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 16000}
    assert s["audio"]["input"]["sample_rate_hz"] == 16000
    assert s["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert s["audio"]["output"]["voice"] == s["voice"] == "joe"
    td = {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "create_response": True,
        "interrupt_response": True,
    }
    assert s["turn_detection"] == s["audio"]["input"]["turn_detection"] == td
    # Duplex extensions.
    assert s["max_output_tokens"] == s["max_response_output_tokens"] == "inf"
    assert s["active_response_id"] is None
    assert s["playback"] == {"generated_ms": 0, "sent_ms": 0, "played_ms": 0, "committed_ms": 0}
    assert s["capabilities"]["implementation_level"] == "cascade"
    assert s["capabilities"]["input_modes"] == ["append_audio_chunk"]
    assert s["extra_body"] == {
        "native_duplex": True,
        "auto_response": True,
        "return_stage_metrics": False,
    }
    assert (s["overlap_policy"], s["playback_commit_policy"]) == ("listen_only", "ack_only")


def test_turn_detection_mode_none_projects_to_null() -> None:
    s = project(
        _event(
            "session_updated",
            _state(turn_detection=cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_NONE)),
        )
    )["session"]
    assert s["turn_detection"] is None
    assert s["audio"]["input"]["turn_detection"] is None


def test_semantic_vad_projects_in_openai_shape_and_validates_with_the_sdk() -> None:
    td = cpb.TurnDetection(
        mode=cpb.TURN_DETECTION_MODE_SEMANTIC_VAD,
        eagerness="high",
        create_response=True,
        interrupt_response=False,
    )
    wire = project(_event("session_updated", _state(turn_detection=td)))
    expected = {
        "type": "semantic_vad",
        "eagerness": "high",
        "create_response": True,
        "interrupt_response": False,
    }
    assert wire["session"]["turn_detection"] == expected
    assert wire["session"]["audio"]["input"]["turn_detection"] == expected
    SemanticVad.model_validate(expected)


def test_session_limits_project_as_numbers_when_set() -> None:
    s = project(_event("session_created", _state(max_output_tokens=64)))["session"]
    assert s["max_output_tokens"] == s["max_response_output_tokens"] == 64


def test_empty_resume_token_projects_to_null() -> None:
    st = _state()
    st.resume_token = ""
    assert project(_event("session_created", st))["resume_token"] is None


def test_session_closed_and_heartbeat_ack_name_the_session() -> None:
    closed = project(_event("session_closed", spb.SessionClosed(session_id="s", reason="timeout")))
    assert (closed["session_id"], closed["reason"]) == ("s", "timeout")
    ack = project(_event("heartbeat_ack", spb.HeartbeatAck(session_id="s")))
    assert ack["session_id"] == "s"


# ------------------------------------------------------------------- errors
def test_error_envelope_shape() -> None:
    wire = project(
        _event(
            "error",
            spb.ErrorEvent(
                type="invalid_request_error",
                code="unsupported_turn_detection",
                message="semantic_vad is unsupported",
                event_id="evt_0001",
                param="turn_detection",
            ),
        )
    )
    assert wire["error"] == {
        "type": "invalid_request_error",
        "code": "unsupported_turn_detection",
        "message": "semantic_vad is unsupported",
        "param": "turn_detection",
        "event_id": "evt_0001",
    }


def test_error_envelope_uses_null_for_empty_param_and_event_id() -> None:
    wire = project(
        _event(
            "error", spb.ErrorEvent(type="server_error", code="runtime_append_failed", message="m")
        )
    )
    assert set(wire["error"]) == {"type", "code", "message", "param", "event_id"}
    assert wire["error"]["param"] is None
    assert wire["error"]["event_id"] is None
    # The event's own id is the server's, not the client's.
    assert wire["event_id"] == "event_error"


# -------------------------------------------------------------------- input
def test_speech_events_carry_their_offsets() -> None:
    started = project(_event("speech_started", spb.SpeechStarted(audio_start_ms=1040, item_id="i")))
    assert (started["audio_start_ms"], started["item_id"]) == (1040, "i")
    stopped = project(_event("speech_stopped", spb.SpeechStopped(audio_end_ms=2860, item_id="i")))
    assert (stopped["audio_end_ms"], stopped["item_id"]) == (2860, "i")


def test_committed_wraps_the_native_event() -> None:
    wire = project(
        _event(
            "input_committed",
            spb.InputCommitted(
                previous_item_id="",
                item_id="item_9b2d",
                turn_id=1,
                epoch=0,
                history_len=1,
                session_id="sess_demo_01",
            ),
        )
    )
    assert wire["previous_item_id"] is None
    assert wire["item_id"] == "item_9b2d"
    assert wire["event"] == {
        "type": "input.committed",
        "session_id": "sess_demo_01",
        "turn_id": 1,
        "epoch": 0,
        "history_len": 1,
        "realtime_item_id": "item_9b2d",
    }
    deferred = project(
        _event("input_committed", spb.InputCommitted(item_id="x", response_create_deferred=True))
    )
    assert deferred["event"]["response_create_deferred"] is True


@pytest.mark.parametrize("kind", ["item_added", "item_created", "item_done"])
def test_item_events_carry_a_realtime_item(kind: str) -> None:
    user = cpb.Item(
        id="item_9b2d",
        type="message",
        role="user",
        status="completed",
        content=[cpb.ContentPart(type="input_audio", transcript="what is the weather")],
    )
    wire = project(_event(kind, spb.ItemEvent(previous_item_id="", item=user)))
    assert wire["previous_item_id"] is None
    assert wire["item"] == {
        "id": "item_9b2d",
        "object": "realtime.item",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_audio", "transcript": "what is the weather"}],
    }
    chained = project(_event(kind, spb.ItemEvent(previous_item_id="item_a", item=user)))
    assert chained["previous_item_id"] == "item_a"


def test_transcription_completed_shape() -> None:
    wire = project(
        _event(
            "transcription_completed",
            spb.TranscriptionCompleted(item_id="i", content_index=0, transcript="hello"),
        )
    )
    assert (wire["item_id"], wire["content_index"], wire["transcript"]) == ("i", 0, "hello")
    # OpenAI requires usage, in its full shape (`input_token_details` too: a
    # TypeScript client drops a transcription without it); no separate
    # transcription model runs, so it is zero tokens.
    assert wire["usage"] == {
        "type": "tokens",
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "input_token_details": {"audio_tokens": 0, "text_tokens": 0},
    }


# ---------------------------------------------------------------- responses
def test_response_created_carries_top_level_response_id_and_duplex_metadata() -> None:
    r = _response(status="in_progress")
    wire = project(_event("response_created", spb.ResponseEvent(response=r)))
    assert wire["response_id"] == "resp_01"
    resp = wire["response"]
    assert resp["id"] == "resp_01"
    assert resp["object"] == "realtime.response"
    assert resp["status"] == "in_progress"
    assert resp["status_details"] is None
    assert resp["modalities"] == resp["output_modalities"] == ["audio"]
    assert resp["metadata"]["trace"] == "turn-3"
    assert resp["metadata"]["duplex_event"] == {
        "type": "response.created",
        "session_id": "sess_demo_01",
        "response_id": "resp_01",
        "epoch": 2,
        "turn_id": 1,
    }


def test_response_done_completed_has_null_status_details_and_the_ledger() -> None:
    wire = project(_event("response_done", spb.ResponseEvent(response=_response())))
    resp = wire["response"]
    assert resp["status"] == "completed"
    assert resp["status_details"] is None
    assert resp["metadata"]["committed"] is True
    assert resp["metadata"]["playback"] == {
        "generated_ms": 2400,
        "sent_ms": 2400,
        "played_ms": 1000,
        "committed_ms": 1000,
    }
    assert resp["output"][0]["content"] == [{"type": "output_audio", "transcript": "It is sunny."}]
    assert "stage_metrics" not in resp["metadata"]


def test_response_done_cancelled_has_typed_status_details() -> None:
    wire = project(
        _event("response_done", spb.ResponseEvent(response=_response("cancelled", "barge_in")))
    )
    assert wire["response"]["status_details"] == {"type": "cancelled", "reason": "barge_in"}


def test_stage_metrics_ride_response_metadata_only_when_asked() -> None:
    r = _response()
    r.has_stage_metrics = True
    r.stage_metrics.CopyFrom(
        cpb.StageMetrics(ttft_ms=12.5, tpot_ms=3.0, itl_ms=[3.0, 4.0], num_generation_tokens=2)
    )
    m = project(_event("response_done", spb.ResponseEvent(response=r)))["response"]["metadata"]
    assert m["stage_metrics"]["vllm_ttft_ms"] == 12.5
    assert m["stage_metrics"]["vllm_itls_ms"] == [3.0, 4.0]
    assert m["stage_metrics"]["num_generation_tokens"] == 2


def test_output_item_events_shape() -> None:
    for kind in ("output_item_added", "output_item_done"):
        wire = project(
            _event(
                kind,
                spb.OutputItemEvent(response_id="resp_01", output_index=0, item=_assistant_item()),
            )
        )
        assert (wire["response_id"], wire["output_index"]) == ("resp_01", 0)
        assert wire["item"]["object"] == "realtime.item"
        assert wire["item"]["role"] == "assistant"


@pytest.mark.parametrize("kind", ["content_part_added", "content_part_done"])
def test_content_part_events_carry_the_part_address(kind: str) -> None:
    audio = project(
        _event(
            kind, spb.ContentPartEvent(ref=REF, part=cpb.ContentPart(type="audio", transcript="t"))
        )
    )
    assert {k: audio[k] for k in ("response_id", "item_id", "output_index", "content_index")} == {
        "response_id": "resp_01",
        "item_id": "item_resp_01",
        "output_index": 0,
        "content_index": 0,
    }
    assert audio["part"] == {"type": "audio", "transcript": "t"}
    text = project(
        _event(kind, spb.ContentPartEvent(ref=REF, part=cpb.ContentPart(type="text", text="x")))
    )
    assert text["part"] == {"type": "text", "text": "x"}


@pytest.mark.parametrize(
    ("fmt", "label"),
    [
        (cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000), ("g711_ulaw", 8000)),
        (cpb.AudioFormat(encoding="g711_alaw", sample_rate_hz=8000), ("g711_alaw", 8000)),
        # A delta that names no encoding is PCM16, at the rate it names.
        (cpb.AudioFormat(sample_rate_hz=24000), ("pcm16", 24000)),
    ],
)
def test_audio_delta_is_labelled_as_the_session_encoded_it(
    fmt: cpb.AudioFormat, label: tuple[str, int]
) -> None:
    """The session encodes each delta and names the encoding: the projector
    sends its bytes as they are and labels them with that name."""
    coded = bytes(range(256))
    wire = project(_event("audio_delta", spb.AudioDelta(ref=REF, audio=coded, format=fmt)))
    assert base64.b64decode(wire["delta"], validate=True) == coded
    assert (wire["format"], wire["sample_rate_hz"]) == label


def test_speak_rides_the_response_envelope() -> None:
    wire = project(_event("response_speak", spb.Speak(ref=REF, session_id="s", epoch=3)))
    assert (wire["response_id"], wire["item_id"]) == ("resp_01", "item_resp_01")
    assert wire["metadata"] == {"session_id": "s", "epoch": 3, "model_speak": True}


def test_audio_delta_is_base64_pcm_with_format_rate_and_metadata() -> None:
    pcm = bytes(range(256)) * 4
    wire = project(
        _event(
            "audio_delta",
            spb.AudioDelta(
                ref=REF,
                audio=pcm,
                session_id="sess_demo_01",
                epoch=1,
                end_of_turn=False,
                audio_duration_ms=1000,
                marks=[cpb.AudioTextMark(text_chars=11, audio_end_ms=1000)],
                playback=cpb.Playback(generated_ms=1000, sent_ms=1000),
                format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
            ),
        )
    )
    assert base64.b64decode(wire["delta"], validate=True) == pcm
    assert wire["format"] == "pcm16"
    assert wire["sample_rate_hz"] == 24000
    assert (wire["response_id"], wire["item_id"], wire["output_index"], wire["content_index"]) == (
        "resp_01",
        "item_resp_01",
        0,
        0,
    )
    assert wire["metadata"] == {
        "session_id": "sess_demo_01",
        "epoch": 1,
        "model_speak": True,
        "end_of_turn": False,
        "audio_duration_ms": 1000,
        "audio_text_marks": [{"text_chars": 11, "audio_end_ms": 1000}],
        "playback": {"generated_ms": 1000, "sent_ms": 1000, "played_ms": 0, "committed_ms": 0},
    }


def test_text_and_transcript_deltas_and_dones() -> None:
    assert (
        project(_event("audio_transcript_delta", spb.TextDelta(ref=REF, delta="It")))["delta"]
        == "It"
    )
    assert project(_event("text_delta", spb.TextDelta(ref=REF, delta="To")))["delta"] == "To"
    done = project(_event("audio_transcript_done", spb.TextDone(ref=REF, text="It is sunny.")))
    assert done["transcript"] == "It is sunny."
    text_done = project(_event("text_done", spb.TextDone(ref=REF, text="Tomorrow.")))
    assert text_done["text"] == "Tomorrow."
    audio_done = project(_event("audio_done", spb.PartDone(ref=REF)))
    assert set(audio_done) == {
        "type",
        "event_id",
        "server_event_seq",
        "response_id",
        "item_id",
        "output_index",
        "content_index",
    }


def test_rate_limits_updated_is_an_empty_list() -> None:
    assert project(_event("rate_limits_updated"))["rate_limits"] == []


def test_listen_carries_response_id_only_when_it_ends_a_precreated_response() -> None:
    bare = project(
        _event("response_listen", spb.Listen(session_id="s", epoch=0, reason="model_listen"))
    )
    assert "response_id" not in bare
    assert bare["response"] == {
        "object": "realtime.response",
        "status": "listening",
        "metadata": {
            "type": "response.listen",
            "session_id": "s",
            "epoch": 0,
            "reason": "model_listen",
        },
    }
    ending = project(_event("response_listen", spb.Listen(session_id="s", response_id="resp_9")))
    assert ending["response_id"] == "resp_9"


# ------------------------------------------------------- official openai SDK
def _sdk_parse(wire: dict[str, Any]) -> Any:
    """What `openai`'s `RealtimeConnection.parse_event` makes of one wire event."""
    return construct_type_unchecked(
        value=json.loads(json.dumps(wire)), type_=cast(Any, RealtimeServerEvent)
    )


def _examples() -> dict[str, Message]:
    user = cpb.Item(
        id="item_9b2d",
        type="message",
        role="user",
        status="completed",
        content=[cpb.ContentPart(type="input_audio", transcript="hi")],
    )
    return {
        # OpenAI's default input rate: its SDK types only 24 kHz PCM.
        "session_created": _state(
            input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000)
        ),
        "session_updated": _state(
            input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
            turn_detection=cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_NONE),
        ),
        "error": spb.ErrorEvent(type="invalid_request_error", code="c", message="m"),
        "speech_started": spb.SpeechStarted(audio_start_ms=10, item_id="item_9b2d"),
        "speech_stopped": spb.SpeechStopped(audio_end_ms=900, item_id="item_9b2d"),
        "input_committed": spb.InputCommitted(item_id="item_9b2d", turn_id=1),
        "item_added": spb.ItemEvent(item=user),
        "item_created": spb.ItemEvent(item=user),
        "item_done": spb.ItemEvent(previous_item_id="item_9b2d", item=_assistant_item()),
        "output_item_added": spb.OutputItemEvent(
            response_id="resp_01", item=_assistant_item("in_progress")
        ),
        "output_item_done": spb.OutputItemEvent(response_id="resp_01", item=_assistant_item()),
        "content_part_added": spb.ContentPartEvent(
            ref=REF, part=cpb.ContentPart(type="audio", transcript="")
        ),
        "content_part_done": spb.ContentPartEvent(
            ref=REF, part=cpb.ContentPart(type="audio", transcript="It is sunny.")
        ),
        "audio_delta": spb.AudioDelta(
            ref=REF,
            audio=b"\x01\x00" * 4,
            format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
        ),
        "audio_transcript_delta": spb.TextDelta(ref=REF, delta="It"),
        "text_delta": spb.TextDelta(ref=REF, delta="It"),
        "audio_done": spb.PartDone(ref=REF),
        "audio_transcript_done": spb.TextDone(ref=REF, text="It is sunny."),
        "text_done": spb.TextDone(ref=REF, text="It is sunny."),
        "transcription_completed": spb.TranscriptionCompleted(item_id="item_9b2d", transcript="hi"),
        "item_deleted": spb.ItemDeleted(item_id="item_9b2d"),
        "item_retrieved": spb.ItemRetrieved(item=_assistant_item()),
        "item_truncated": spb.ItemTruncated(
            item_id="item_resp_01", content_index=0, audio_end_ms=1850, transcript="It is"
        ),
        "output_audio_cleared": spb.OutputAudioCleared(response_id="resp_01"),
        "input_cancelled": spb.InputCancelled(session_id="sess_demo_01", epoch=2),
        "function_call_arguments_delta": spb.FunctionCallArguments(
            ref=FC_REF, call_id="call_7d1f", arguments='{"city":'
        ),
    }


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in TIER3_KINDS])
def test_openai_sdk_parses_every_openai_named_event_into_its_model(kind: str) -> None:
    """A stock `openai` client dispatches each OpenAI-named event to the model of that name."""
    parsed = _sdk_parse(project(_event(kind, _examples().get(kind))))
    type_field = type(parsed).model_fields["type"].annotation
    assert typing.get_args(type_field) == (WIRE_TYPE[kind],)


@pytest.mark.parametrize("kind", [*sorted(_examples()), "input_cleared", "rate_limits_updated"])
def test_tier1_events_validate_strictly_against_openai_sdk_models(kind: str) -> None:
    """Tier 1/2 shapes are OpenAI's: the SDK's own pydantic models accept them as they are."""
    wire = project(_event(kind, _examples().get(kind)))
    model = type(_sdk_parse(wire))
    model.model_validate(wire)


def test_session_lifetime_events_have_the_reference_shapes() -> None:
    resumed = project(
        _event(
            "session_resumed",
            spb.SessionResumed(
                session_id="s", incarnation=2, attachment_generation=3, resume_token="rt_x"
            ),
        )
    )
    assert {k: resumed[k] for k in ("session_id", "incarnation", "attachment_generation")} == {
        "session_id": "s",
        "incarnation": 2,
        "attachment_generation": 3,
    }
    assert resumed["resume_token"] == "rt_x"
    assert "session" not in resumed  # a resume from before sessions rode along
    replaced = project(
        _event("session_replaced", spb.SessionReplaced(session_id="s", attachment_generation=1))
    )
    assert replaced["attachment_generation"] == 1
    expired = project(
        _event("session_expired", spb.SessionExpired(session_id="s", reason="idle_ttl_expired"))
    )
    assert expired["reason"] == "idle_ttl_expired"
    resync = project(
        _event("resync_required", spb.ResyncRequired(session_id="s", reason="journal_gap"))
    )
    assert (resync["type"], resync["reason"]) == ("session.resync_required", "journal_gap")


def test_function_call_arguments_done_validates_against_the_openai_sdk_model() -> None:
    """OpenAI's `.done` names the function it completes."""
    wire = project(
        _event(
            "function_call_arguments_done",
            spb.FunctionCallArguments(
                ref=FC_REF, call_id="call_7d1f", name="get_weather", arguments="{}"
            ),
        )
    )
    assert wire["name"] == "get_weather"
    type(_sdk_parse(wire)).model_validate(wire)


# -------------------------------------------------------------------- items
def _function_call() -> cpb.Item:
    return cpb.Item(
        id="item_fc_01",
        type="function_call",
        status="completed",
        name="get_weather",
        call_id="call_7d1f",
        arguments='{"city":"Hong Kong"}',
    )


def test_function_call_items_carry_name_call_id_and_arguments_and_no_content() -> None:
    wire = project(
        _event(
            "output_item_added",
            spb.OutputItemEvent(response_id="resp_fc_01", output_index=0, item=_function_call()),
        )
    )
    assert wire["item"] == {
        "id": "item_fc_01",
        "object": "realtime.item",
        "type": "function_call",
        "status": "completed",
        "name": "get_weather",
        "call_id": "call_7d1f",
        "arguments": '{"city":"Hong Kong"}',
    }


def test_function_call_output_items_carry_call_id_and_output() -> None:
    output = cpb.Item(
        id="item_out",
        type="function_call_output",
        status="completed",
        call_id="call_7d1f",
        output='{"temperature_c": 24}',
    )
    for kind in ("item_added", "item_created", "item_done"):
        wire = project(_event(kind, spb.ItemEvent(previous_item_id="item_fc_01", item=output)))
        assert wire["item"] == {
            "id": "item_out",
            "object": "realtime.item",
            "type": "function_call_output",
            "status": "completed",
            "call_id": "call_7d1f",
            "output": '{"temperature_c": 24}',
        }
        assert wire["previous_item_id"] == "item_fc_01"
        type(_sdk_parse(wire)).model_validate(wire)


def test_item_added_and_created_are_both_projected_with_the_same_body() -> None:
    """Both generations of OpenAI client: GA `.added` and beta `.created`."""
    body = spb.ItemEvent(previous_item_id="item_a", item=_assistant_item("in_progress"))
    added = project(_event("item_added", body))
    created = project(_event("item_created", body))
    assert (added["type"], created["type"]) == (
        "conversation.item.added",
        "conversation.item.created",
    )
    strip = ("type", "event_id", "server_event_seq")
    assert {k: v for k, v in added.items() if k not in strip} == {
        k: v for k, v in created.items() if k not in strip
    }


def test_item_retrieved_carries_the_whole_item() -> None:
    wire = project(_event("item_retrieved", spb.ItemRetrieved(item=_assistant_item())))
    assert wire["item"] == {
        "id": "item_resp_01",
        "object": "realtime.item",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_audio", "transcript": "It is sunny."}],
    }


def test_item_deleted_echoes_the_request_under_event() -> None:
    wire = project(_event("item_deleted", spb.ItemDeleted(item_id="item_9b2d")))
    assert wire["item_id"] == "item_9b2d"
    assert wire["event"] == {"type": "conversation.item.deleted", "item_id": "item_9b2d"}


def test_item_truncated_echoes_the_request_and_the_transcript_kept() -> None:
    wire = project(
        _event(
            "item_truncated",
            spb.ItemTruncated(
                item_id="item_resp_01", content_index=0, audio_end_ms=1850, transcript="It is"
            ),
        )
    )
    assert (wire["item_id"], wire["content_index"], wire["audio_end_ms"]) == (
        "item_resp_01",
        0,
        1850,
    )
    assert wire["event"] == {
        "type": "conversation.item.truncated",
        "item_id": "item_resp_01",
        "content_index": 0,
        "audio_end_ms": 1850,
        "transcript": "It is",
    }


# ---------------------------------------------------- output and input control
def test_output_audio_buffer_cleared_names_the_response() -> None:
    wire = project(_event("output_audio_cleared", spb.OutputAudioCleared(response_id="resp_01")))
    assert wire["type"] == "output_audio_buffer.cleared"
    assert wire["response_id"] == "resp_01"


def test_input_cancelled_is_input_audio_buffer_cleared_with_the_native_event() -> None:
    wire = project(_event("input_cancelled", spb.InputCancelled(session_id="s", epoch=3)))
    assert wire["type"] == "input_audio_buffer.cleared"
    assert wire["event"] == {"type": "input.cancelled", "session_id": "s", "epoch": 3}
    # A plain clear stays bare, as the reference shows it.
    plain = project(_event("input_cleared"))
    assert set(plain) == {"type", "event_id", "server_event_seq"}


# ------------------------------------------------------- playback and overlap
def test_playback_acknowledged_wraps_the_native_event_verbatim() -> None:
    wire = project(
        _event(
            "playback_acknowledged",
            spb.PlaybackAcknowledged(
                session_id="sess_demo_01",
                epoch=0,
                response_id="resp_01",
                item_id="item_resp_01",
                played_ms=1000,
                committed_ms=1000,
                truncate=False,
                playback=cpb.Playback(
                    generated_ms=2400, sent_ms=2400, played_ms=1000, committed_ms=1000
                ),
                history_committed=False,
            ),
        )
    )
    assert set(wire) == {"type", "event_id", "server_event_seq", "event"}
    assert wire["event"] == {
        "type": "playback.acknowledged",
        "session_id": "sess_demo_01",
        "epoch": 0,
        "response_id": "resp_01",
        "item_id": "item_resp_01",
        "played_ms": 1000,
        "committed_ms": 1000,
        "truncate": False,
        "playback": {
            "generated_ms": 2400,
            "sent_ms": 2400,
            "played_ms": 1000,
            "committed_ms": 1000,
        },
        "history_committed": False,
    }


def test_overlap_decision_carries_every_reference_field() -> None:
    wire = project(
        _event(
            "overlap_decision",
            spb.OverlapDecision(
                session_id="sess_demo_01",
                epoch=0,
                policy="listen_only",
                action="listen",
                reason="long_overlap_speech",
                overlap_ms=1400,
                buffer_audio=True,
                defer_runtime_append=True,
                force_listen=True,
            ),
        )
    )
    assert {k: v for k, v in wire.items() if k not in ("event_id", "server_event_seq")} == {
        "type": "overlap.decision",
        "session_id": "sess_demo_01",
        "epoch": 0,
        "policy": "listen_only",
        "action": "listen",
        "reason": "long_overlap_speech",
        "overlap_ms": 1400,
        "buffer_audio": True,
        "defer_runtime_append": True,
        "force_listen": True,
    }


# ------------------------------------------------------------- function calls
def test_function_call_arguments_delta_and_done_address_the_call() -> None:
    delta = project(
        _event(
            "function_call_arguments_delta",
            spb.FunctionCallArguments(ref=FC_REF, call_id="call_7d1f", arguments='{"city":'),
        )
    )
    address = {
        "response_id": "resp_fc_01",
        "item_id": "item_fc_01",
        "output_index": 0,
        "call_id": "call_7d1f",
    }
    assert {k: delta[k] for k in address} == address
    assert delta["delta"] == '{"city":'
    assert "content_index" not in delta
    done = project(
        _event(
            "function_call_arguments_done",
            spb.FunctionCallArguments(ref=FC_REF, call_id="call_7d1f", arguments='{"city":"HK"}'),
        )
    )
    assert {k: done[k] for k in address} == address
    assert done["arguments"] == '{"city":"HK"}'


def test_session_resumed_carries_the_session_as_it_is_now() -> None:
    """The new socket (and its client) learn the config, formats included, there."""
    config = cpb.SessionConfig(
        model="m",
        output_modalities=["audio"],
        input_audio_format=cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000),
        output_audio_format=cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000),
        resumable=True,
    )
    resumed = project(
        _event(
            "session_resumed",
            spb.SessionResumed(
                session_id="s",
                incarnation=1,
                attachment_generation=2,
                resume_token="rt_y",
                session=spb.SessionState(config=config, session_id="s", state="open"),
            ),
        )
    )
    session = resumed["session"]
    assert session["audio"]["output"]["format"] == {"type": "audio/pcmu"}
    assert session["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert (session["id"], session["resumable"]) == ("s", True)


def test_a_malformed_call_is_the_reference_s_raw_fallback() -> None:
    """`duplex.function_call.done` wraps the native `function_call.done` with no
    call id, exactly the reference's example's keys."""
    frame = project(
        _event(
            "function_call_malformed",
            spb.MalformedFunctionCall(
                session_id="sess_demo_01", epoch=0, response_id="resp_01", arguments="{"
            ),
        )
    )
    assert frame["type"] == "duplex.function_call.done"
    assert frame["event"] == {
        "type": "function_call.done",
        "session_id": "sess_demo_01",
        "epoch": 0,
        "call_id": None,
        "name": None,
        "arguments": "{",
    }
