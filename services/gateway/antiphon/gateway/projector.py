"""Typed `ServerEvent` -> the duplex dialect's JSON, one wire event per typed event.

Shapes follow `reference/realtime-duplex-api.md`: OpenAI's GA event names,
both beta and GA session spellings at once, and the duplex extensions (tier 2
fields, tier 3 events). Every event carries `event_id` and `server_event_seq`.
This is what `/v1/realtime?duplex=1` speaks; the native `/v1/duplex` dialect
(`native`) and OpenAI's own (`openai_dialect`) are built on it. The objects
inside events (session, items, responses) are `shapes`'s.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from antiphon.common.audio_formats import PCM16
from antiphon.gateway.shapes import (
    Json,
    content_part,
    item,
    playback,
    response_object,
    session_object,
)
from antiphon.v1 import session_pb2 as spb


def project(ev: spb.ServerEvent) -> Json:
    kind = ev.WhichOneof("kind")
    if kind is None:
        raise ValueError("server event without a kind")
    wire_type, build = _PROJECTIONS[kind]
    body = build(getattr(ev, kind))
    return {"type": wire_type, "event_id": ev.event_id, "server_event_seq": ev.seq, **body}


# ------------------------------------------------------------------ events
def _ref(ref: spb.PartRef) -> Json:
    return {
        "response_id": ref.response_id,
        "item_id": ref.item_id,
        "output_index": ref.output_index,
        "content_index": ref.content_index,
    }


def _session_state(st: spb.SessionState) -> Json:
    return {
        "incarnation": st.incarnation,
        "attachment_generation": st.attachment_generation,
        "resume_token": st.resume_token or None,
        "session": session_object(st),
    }


def _resumed(e: spb.SessionResumed) -> Json:
    body: Json = {
        "session_id": e.session_id,
        "incarnation": e.incarnation,
        "attachment_generation": e.attachment_generation,
        "resume_token": e.resume_token,
    }
    if e.HasField("session"):
        # The configuration the resumed socket now speaks (formats included).
        body["session"] = session_object(e.session)
    return body


def _error(e: spb.ErrorEvent) -> Json:
    return {
        "error": {
            "type": e.type,
            "code": e.code,
            "message": e.message,
            "param": e.param or None,
            "event_id": e.event_id or None,
        }
    }


def _item_event(e: spb.ItemEvent) -> Json:
    return {"previous_item_id": e.previous_item_id or None, "item": item(e.item)}


def _committed(e: spb.InputCommitted) -> Json:
    event: Json = {
        "type": "input.committed",
        "session_id": e.session_id,
        "turn_id": e.turn_id,
        "epoch": e.epoch,
        "history_len": e.history_len,
        "realtime_item_id": e.item_id or None,
    }
    if e.response_create_deferred:
        event["response_create_deferred"] = True
    return {
        "previous_item_id": e.previous_item_id or None,
        "item_id": e.item_id or None,
        "event": event,
    }


def _audio_delta(e: spb.AudioDelta) -> Json:
    # Encoded by the session, which names the encoding and rate it made.
    return {
        **_ref(e.ref),
        "delta": base64.b64encode(e.audio).decode("ascii"),
        "format": e.format.encoding or PCM16,
        "sample_rate_hz": e.format.sample_rate_hz,
        "metadata": {
            "session_id": e.session_id,
            "epoch": e.epoch,
            "model_speak": True,
            "end_of_turn": e.end_of_turn,
            "audio_duration_ms": e.audio_duration_ms,
            "audio_text_marks": [
                {"text_chars": m.text_chars, "audio_end_ms": m.audio_end_ms} for m in e.marks
            ],
            "playback": playback(e.playback),
        },
    }


def _listen(e: spb.Listen) -> Json:
    body: Json = {
        "session_id": e.session_id,
        "epoch": e.epoch,
        "response": {
            "object": "realtime.response",
            "status": "listening",
            "metadata": {
                "type": "response.listen",
                "session_id": e.session_id,
                "epoch": e.epoch,
                "reason": e.reason,
            },
        },
    }
    if e.response_id:
        body["response_id"] = e.response_id
    return body


def _item_deleted(e: spb.ItemDeleted) -> Json:
    # Tier 2: the originating event echoed under `event`.
    return {
        "item_id": e.item_id,
        "event": {"type": "conversation.item.deleted", "item_id": e.item_id},
    }


def _item_truncated(e: spb.ItemTruncated) -> Json:
    truncated = {
        "item_id": e.item_id,
        "content_index": e.content_index,
        "audio_end_ms": e.audio_end_ms,
    }
    # The echo also carries the transcript kept (words heard by `audio_end_ms`).
    return {
        **truncated,
        "event": {"type": "conversation.item.truncated", **truncated, "transcript": e.transcript},
    }


def _input_cancelled(e: spb.InputCancelled) -> Json:
    # The reference projects the native `input.cancelled` as `input_audio_buffer.cleared`;
    # the native event rides under `event` so a duplex client sees the epoch advance.
    return {"event": {"type": "input.cancelled", "session_id": e.session_id, "epoch": e.epoch}}


def playback_acknowledged(e: spb.PlaybackAcknowledged) -> Json:
    """The native `playback.acknowledged` event (the Realtime dialect wraps it verbatim)."""
    return {
        "type": "playback.acknowledged",
        "session_id": e.session_id,
        "epoch": e.epoch,
        "response_id": e.response_id,
        "item_id": e.item_id,
        "played_ms": e.played_ms,
        "committed_ms": e.committed_ms,
        "truncate": e.truncate,
        "playback": playback(e.playback),
        "history_committed": e.history_committed,
    }


def _overlap_decision(e: spb.OverlapDecision) -> Json:
    return {
        "session_id": e.session_id,
        "epoch": e.epoch,
        "policy": e.policy,
        "action": e.action,
        "reason": e.reason,
        "overlap_ms": e.overlap_ms,
        "buffer_audio": e.buffer_audio,
        "defer_runtime_append": e.defer_runtime_append,
        "force_listen": e.force_listen,
    }


def _call_ref(e: spb.FunctionCallArguments) -> Json:
    # Function-call events address the output item, not a content part.
    return {
        "response_id": e.ref.response_id,
        "item_id": e.ref.item_id,
        "output_index": e.ref.output_index,
        "call_id": e.call_id,
    }


def _malformed_call(e: spb.MalformedFunctionCall) -> Json:
    # The reference's raw fallback: the native `function_call.done`, wrapped
    # under `event`, with the call id (and the name, if it gave none) null.
    return {
        "event": {
            "type": "function_call.done",
            "session_id": e.session_id,
            "epoch": e.epoch,
            "call_id": None,
            "name": e.name or None,
            "arguments": e.arguments,
        }
    }


def transcription_usage() -> Json:
    """OpenAI's required `usage`, in its full shape (a TypeScript client drops a
    transcription whose usage lacks `input_token_details`). No separate
    transcription model runs here (the transcript comes from stage0, as the
    reference says): it uses no tokens."""
    return {
        "type": "tokens",
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "input_token_details": {"audio_tokens": 0, "text_tokens": 0},
    }


def _transcription(e: spb.TranscriptionCompleted) -> Json:
    return {
        "item_id": e.item_id,
        "content_index": e.content_index,
        "transcript": e.transcript,
        "usage": transcription_usage(),
    }


_PROJECTIONS: dict[str, tuple[str, Callable[[Any], Json]]] = {
    "session_created": ("session.created", _session_state),
    "session_updated": ("session.updated", _session_state),
    "session_closed": (
        "session.closed",
        lambda e: {"session_id": e.session_id, "reason": e.reason},
    ),
    "heartbeat_ack": ("session.heartbeat_ack", lambda e: {"session_id": e.session_id}),
    "session_resumed": ("session.resumed", _resumed),
    "session_replaced": (
        "session.replaced",
        lambda e: {"session_id": e.session_id, "attachment_generation": e.attachment_generation},
    ),
    "session_expired": (
        "session.expired",
        lambda e: {"session_id": e.session_id, "incarnation": e.incarnation, "reason": e.reason},
    ),
    "resync_required": (
        "session.resync_required",
        lambda e: {"session_id": e.session_id, "reason": e.reason},
    ),
    "error": ("error", _error),
    "speech_started": (
        "input_audio_buffer.speech_started",
        lambda e: {"audio_start_ms": e.audio_start_ms, "item_id": e.item_id},
    ),
    "speech_stopped": (
        "input_audio_buffer.speech_stopped",
        lambda e: {"audio_end_ms": e.audio_end_ms, "item_id": e.item_id},
    ),
    "input_committed": ("input_audio_buffer.committed", _committed),
    "input_cleared": ("input_audio_buffer.cleared", lambda e: {}),
    "item_added": ("conversation.item.added", _item_event),
    "item_created": ("conversation.item.created", _item_event),
    "item_done": ("conversation.item.done", _item_event),
    "transcription_completed": (
        "conversation.item.input_audio_transcription.completed",
        _transcription,
    ),
    "response_created": (
        "response.created",
        lambda e: {
            "response_id": e.response.id,
            "response": response_object(e.response, "response.created"),
        },
    ),
    "output_item_added": (
        "response.output_item.added",
        lambda e: {
            "response_id": e.response_id,
            "output_index": e.output_index,
            "item": item(e.item),
        },
    ),
    "content_part_added": (
        "response.content_part.added",
        lambda e: {**_ref(e.ref), "part": content_part(e.part)},
    ),
    "response_speak": (
        "response.speak",
        lambda e: {
            **_ref(e.ref),
            "metadata": {"session_id": e.session_id, "epoch": e.epoch, "model_speak": True},
        },
    ),
    "audio_delta": ("response.output_audio.delta", _audio_delta),
    "audio_transcript_delta": (
        "response.output_audio_transcript.delta",
        lambda e: {**_ref(e.ref), "delta": e.delta},
    ),
    "text_delta": ("response.output_text.delta", lambda e: {**_ref(e.ref), "delta": e.delta}),
    "audio_done": ("response.output_audio.done", lambda e: _ref(e.ref)),
    "audio_transcript_done": (
        "response.output_audio_transcript.done",
        lambda e: {**_ref(e.ref), "transcript": e.text},
    ),
    "text_done": ("response.output_text.done", lambda e: {**_ref(e.ref), "text": e.text}),
    "content_part_done": (
        "response.content_part.done",
        lambda e: {**_ref(e.ref), "part": content_part(e.part)},
    ),
    "output_item_done": (
        "response.output_item.done",
        lambda e: {
            "response_id": e.response_id,
            "output_index": e.output_index,
            "item": item(e.item),
        },
    ),
    "response_done": (
        "response.done",
        lambda e: {
            "response_id": e.response.id,
            "response": response_object(e.response, "response.done"),
        },
    ),
    "rate_limits_updated": ("rate_limits.updated", lambda e: {"rate_limits": []}),
    "response_listen": ("response.listen", _listen),
    "item_deleted": ("conversation.item.deleted", _item_deleted),
    "item_retrieved": ("conversation.item.retrieved", lambda e: {"item": item(e.item)}),
    "item_truncated": ("conversation.item.truncated", _item_truncated),
    "output_audio_cleared": (
        "output_audio_buffer.cleared",
        lambda e: {"response_id": e.response_id},
    ),
    "playback_acknowledged": (
        "playback.acknowledged",
        lambda e: {"event": playback_acknowledged(e)},
    ),
    "overlap_decision": ("overlap.decision", _overlap_decision),
    "input_cancelled": ("input_audio_buffer.cleared", _input_cancelled),
    "function_call_arguments_delta": (
        "response.function_call_arguments.delta",
        lambda e: {**_call_ref(e), "delta": e.arguments},
    ),
    "function_call_arguments_done": (
        "response.function_call_arguments.done",
        lambda e: {**_call_ref(e), "name": e.name, "arguments": e.arguments},
    ),
    "function_call_malformed": ("duplex.function_call.done", _malformed_call),
}
