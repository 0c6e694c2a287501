"""Typed server events as the gateway's tests build them, and what the
official `openai` SDK makes of a projected one."""

from __future__ import annotations

import json
from typing import Any, cast

from google.protobuf.message import Message
from openai._models import construct_type_unchecked
from openai.types.realtime import RealtimeServerEvent

from antiphon.gateway.dialects import openai_dialect as od
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.support.protos import with_fields

# Every kind of server event, as the protos declare them.
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


def event(kind: str, body: Message | None = None, *, seq: int = 7) -> spb.ServerEvent:
    """A server event of `kind` carrying `body` (the kind's empty message if None)."""
    ev = spb.ServerEvent(seq=seq, event_id=f"event_{kind}")
    if body is None:
        getattr(ev, kind).SetInParent()
    else:
        getattr(ev, kind).CopyFrom(body)
    return ev


def state(**config: Any) -> spb.SessionState:
    """An open session's state; `config` overrides its configuration's fields."""
    cfg = cpb.SessionConfig(
        model="antiphon-cascade",
        instructions="Be brief.",
        voice="joe",
        output_modalities=["audio", "text"],
        input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=16000),
        output_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
        turn_detection=SERVER_VAD,
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


def openai_state(**config: Any) -> spb.SessionState:
    """`state` as a stock OpenAI client would set it up: audio out, 24 kHz PCM
    in (the one rate OpenAI names), resumable."""
    defaults: dict[str, Any] = {
        "output_modalities": ["audio"],
        "input_audio_format": cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
        "resumable": True,
    }
    return state(**{**defaults, **config})


def assistant_item(status: str = "completed", part: str = "output_audio") -> cpb.Item:
    """The assistant's reply, "It is sunny.", as a `part` content part."""
    content = cpb.ContentPart(type=part, transcript="It is sunny.")
    if part in ("text", "output_text"):
        content = cpb.ContentPart(type=part, text="It is sunny.")
    return cpb.Item(
        id="item_resp_01", type="message", role="assistant", status=status, content=[content]
    )


def function_call() -> cpb.Item:
    return cpb.Item(
        id="item_fc_01",
        type="function_call",
        status="completed",
        name="get_weather",
        call_id="call_7d1f",
        arguments='{"city":"Hong Kong"}',
    )


def sdk_parse(wire: dict[str, Any]) -> Any:
    """What `openai`'s `RealtimeConnection.parse_event` makes of one wire event."""
    return construct_type_unchecked(
        value=json.loads(json.dumps(wire)), type_=cast(Any, RealtimeServerEvent)
    )


def response(status: str = "completed", reason: str = "") -> spb.Response:
    """A response of one assistant item, its audio played and committed to 1 s."""
    return spb.Response(
        id="resp_01",
        status=status,
        status_reason=reason,
        output=[assistant_item()],
        output_modalities=["audio"],
        epoch=2,
        turn_id=1,
        session_id="sess_demo_01",
        committed=True,
        playback=cpb.Playback(generated_ms=2400, sent_ms=2400, played_ms=1000, committed_ms=1000),
        metadata={"trace": "turn-3"},
    )


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
    "transcription_delta": "conversation.item.input_audio_transcription.delta",
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
    # A GPT-Live append taken into the model's context (issue 49).
    "context_appended": "session.context.appended",
}


def user_item(part: cpb.ContentPart) -> cpb.Item:
    return cpb.Item(id="item_9b2d", type="message", role="user", status="completed", content=[part])


def openai_response(status: str, reason: str = "", **fields: Any) -> spb.Response:
    return spb.Response(
        id="resp_01",
        status=status,
        status_reason=reason,
        output=[assistant_item("completed" if status == "completed" else "incomplete")],
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
# shape its fields can take here (`openai_dialect` sends each as OpenAI does).
OPENAI_CASES: list[tuple[str, Message | None]] = [
    ("session_created", openai_state()),
    ("session_updated", openai_state()),
    ("session_updated", openai_state(turn_detection=cpb.TurnDetection())),
    (
        "session_updated",
        openai_state(
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
        openai_state(
            input_audio_format=cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000),
            output_audio_format=cpb.AudioFormat(encoding="g711_alaw", sample_rate_hz=8000),
        ),
    ),
    (
        "session_updated",
        openai_state(input_audio_format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=16000)),
    ),
    (
        "session_updated",
        openai_state(
            input_audio_format=cpb.AudioFormat(encoding="pcm_f32le", sample_rate_hz=24000)
        ),
    ),
    ("session_updated", openai_state(max_output_tokens=256, output_modalities=["text"])),
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
    ("item_added", spb.ItemEvent(item=user_item(cpb.ContentPart(type="input_audio")))),
    ("item_created", spb.ItemEvent(item=user_item(cpb.ContentPart(type="text", text="Hi")))),
    (
        "item_done",
        spb.ItemEvent(
            previous_item_id="item_9b2d",
            item=user_item(cpb.ContentPart(type="input_audio", transcript="what is it")),
        ),
    ),
    ("item_done", spb.ItemEvent(item=assistant_item())),
    ("item_done", spb.ItemEvent(item=assistant_item(part="text"))),
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
    ("item_added", spb.ItemEvent(item=function_call())),
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
    ("transcription_delta", spb.TranscriptionDelta(item_id="item_9b2d", delta=" there")),
    ("response_created", spb.ResponseEvent(response=openai_response("in_progress", metadata={}))),
    (
        "response_created",
        spb.ResponseEvent(
            response=openai_response("in_progress", metadata={"client_event_id": "evt_9"})
        ),
    ),
    ("response_done", spb.ResponseEvent(response=openai_response("completed"))),
    *[
        ("response_done", spb.ResponseEvent(response=openai_response("cancelled", reason)))
        for reason in [*sorted(od.REASONS), "idle_ttl_expired", ""]
    ],
    ("response_done", spb.ResponseEvent(response=openai_response("failed", "stage0_unavailable"))),
    (
        "response_done",
        spb.ResponseEvent(response=openai_response("incomplete", "max_output_tokens")),
    ),
    (
        "output_item_added",
        spb.OutputItemEvent(response_id="resp_01", item=assistant_item("in_progress")),
    ),
    ("output_item_done", spb.OutputItemEvent(response_id="resp_01", item=assistant_item())),
    (
        "content_part_added",
        spb.ContentPartEvent(ref=REF, part=cpb.ContentPart(type="audio")),
    ),
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
    ("item_retrieved", spb.ItemRetrieved(item=assistant_item())),
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
