"""Typed `ServerEvent` -> the duplex dialect's JSON, one wire event per typed event.

Shapes follow `reference/realtime-duplex-api.md`: OpenAI's GA event names,
both beta and GA session spellings at once, and the duplex extensions (tier 2
fields, tier 3 events). Every event carries `event_id` and `server_event_seq`.
This is what `/v1/realtime?duplex=1` speaks; the native `/v1/duplex` dialect
(`native`) is built on it. The events OpenAI also sends are `ga_events`'s
(OpenAI's own dialect builds its frames from them too), some with the duplex
extensions added here; the objects inside events are `shapes`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from antiphon.common.audio_formats import PCM16
from antiphon.common.event_kinds import EventKind, body_of, kind_of
from antiphon.gateway.dialects.ga_events import Projection, ga_events, part_ref, truncated
from antiphon.gateway.dialects.shapes import (
    Json,
    error,
    item,
    playback,
    response_object,
    session_object,
)
from antiphon.v1 import session_pb2 as spb


def project(ev: spb.ServerEvent) -> Json:
    kind = kind_of(ev)
    wire_type, build = _PROJECTIONS[kind]
    body = build(body_of(ev, kind))
    return {"type": wire_type, "event_id": ev.event_id, "server_event_seq": ev.seq, **body}


# ------------------------------------------------------------------ events
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


# The duplex dialect's own events: OpenAI has none of these, or its own shape.
_DUPLEX: dict[EventKind, Projection] = {
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
    "error": ("error", lambda e: {"error": error(e, e.code)}),
    "response_created": (
        "response.created",
        lambda e: {
            "response_id": e.response.id,
            "response": response_object(e.response, "response.created"),
        },
    ),
    "response_done": (
        "response.done",
        lambda e: {
            "response_id": e.response.id,
            "response": response_object(e.response, "response.done"),
        },
    ),
    "response_speak": (
        "response.speak",
        lambda e: {
            **part_ref(e.ref),
            "metadata": {"session_id": e.session_id, "epoch": e.epoch, "model_speak": True},
        },
    ),
    "response_listen": ("response.listen", _listen),
    "playback_acknowledged": (
        "playback.acknowledged",
        lambda e: {"event": playback_acknowledged(e)},
    ),
    "overlap_decision": ("overlap.decision", _overlap_decision),
    "function_call_malformed": ("duplex.function_call.done", _malformed_call),
    # Only a GPT-Live socket appends context; told here all the same, as every kind is.
    "context_appended": (
        "session.context.appended",
        lambda e: {
            "channel": e.channel,
            "client_event_id": e.client_event_id or None,
            "frame_index": e.frame_index,
        },
    ),
}


# ------------------------------------------------------ extensions of GA events
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
    return {"event": event}


def _audio_delta(e: spb.AudioDelta) -> Json:
    # Encoded by the session, which names the encoding and rate it made.
    return {
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


def _item_truncated(e: spb.ItemTruncated) -> Json:
    # The echo also carries the transcript kept (words heard by `audio_end_ms`).
    return {
        "event": {
            "type": "conversation.item.truncated",
            **truncated(e),
            "transcript": e.transcript,
        }
    }


# GA kind -> the duplex fields that follow OpenAI's in its frame. Tier 2
# echoes the originating native event under `event`.
_EXTENSIONS: dict[EventKind, Callable[[Any], Json]] = {
    "input_committed": _committed,
    "audio_delta": _audio_delta,
    "item_deleted": lambda e: {
        "event": {"type": "conversation.item.deleted", "item_id": e.item_id}
    },
    "item_truncated": _item_truncated,
    # The native event rides under `event` so a duplex client sees the epoch advance.
    "input_cancelled": lambda e: {
        "event": {"type": "input.cancelled", "session_id": e.session_id, "epoch": e.epoch}
    },
}


def _extended(kind: EventKind, projection: Projection) -> Projection:
    extend = _EXTENSIONS.get(kind)
    if extend is None:
        return projection
    wire_type, build = projection
    return wire_type, lambda e: {**build(e), **extend(e)}


_PROJECTIONS: dict[EventKind, Projection] = {
    **{kind: _extended(kind, p) for kind, p in ga_events(item).items()},
    **_DUPLEX,
}
