"""The native `/v1/duplex` dialect: the same typed stream under the runner's own names.

The reference's "Native to Realtime name map" reads right to left here: where
the Realtime dialect renames or wraps a native event, this module gives the
native one back (`input.committed`, `input.cancelled`, `response.text.delta`,
`audio.cancelled`, `function_call.done`, `playback.acknowledged` unwrapped,
flat errors). Every other event is the Realtime projection unchanged, so
both dialects share one projector and one envelope (`event_id`,
`server_event_seq`), and exactly one frame goes out per typed event.

Inbound, the native client names are renamed to the translator's canonical
types; the translator itself validates both dialects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from antiphon.common.event_kinds import EventKind, body_of, kind_of
from antiphon.gateway.dialects.projector import playback_acknowledged, project
from antiphon.gateway.dialects.shapes import Json
from antiphon.v1 import session_pb2 as spb

# Native client event -> the canonical type the translator handles
# (reference: `session.create` (`open_session`, `session.config`) -> first `session.update`).
INPUT_NAMES = {
    "session.create": "session.update",
    "open_session": "session.update",
    "session.config": "session.update",
}

# Keys of a client event that are never session configuration.
_ENVELOPE_KEYS = ("type", "event_id", "operation_id")


def normalize(event: Json) -> Json:
    """A native client event as the translator's canonical event.

    The runner's `session.create` may carry its configuration at the top
    level rather than under `session`; both forms are accepted.
    """
    etype = event.get("type")
    canonical = INPUT_NAMES.get(etype) if isinstance(etype, str) else None
    if canonical is None:
        return event
    out: Json = {k: event[k] for k in _ENVELOPE_KEYS if k in event}
    out["type"] = canonical
    session = event.get("session")
    if session is None:
        session = {k: v for k, v in event.items() if k not in _ENVELOPE_KEYS}
    out["session"] = session
    return out


def project_native(ev: spb.ServerEvent) -> Json:
    frame = project(ev)
    kind = kind_of(ev)
    reshape = _NATIVE.get(kind)
    if reshape is None:
        return frame
    envelope = {"event_id": frame["event_id"], "server_event_seq": frame["server_event_seq"]}
    native = reshape(body_of(ev, kind), frame)
    return {"type": native.pop("type"), **envelope, **native}


# ------------------------------------------------------------------ shapes
def _committed(e: spb.InputCommitted, frame: Json) -> Json:
    # The Realtime dialect wraps exactly this event under `event`.
    return {**frame["event"], "previous_item_id": frame["previous_item_id"]}


def _cancelled_input(e: spb.InputCancelled, frame: Json) -> Json:
    return {"type": "input.cancelled", "session_id": e.session_id, "epoch": e.epoch}


def _audio_delta(e: spb.AudioDelta, frame: Json) -> Json:
    # Native deltas carry the audio as `audio` and their metadata at the top level.
    body = {k: v for k, v in frame.items() if k not in ("delta", "metadata")}
    return {**body, "audio": frame["delta"], **frame.get("metadata", {})}


def _text_delta(e: spb.TextDelta, frame: Json) -> Json:
    return {**frame, "type": "response.text.delta"}


def _response_done(e: spb.ResponseEvent, frame: Json) -> Json:
    """A cancelled response ends natively as `audio.cancelled`; others keep `response.done`."""
    r = e.response
    if r.status != "cancelled":
        return frame
    return {
        "type": "audio.cancelled",
        "session_id": r.session_id,
        "epoch": r.epoch,
        "response_id": r.id,
        "reason": r.status_reason or None,
        "committed_ms": r.playback.committed_ms,
        "playback": frame["response"]["metadata"]["playback"],
        "response": frame["response"],
    }


def _function_call_done(e: spb.FunctionCallArguments, frame: Json) -> Json:
    return {
        "type": "function_call.done",
        "response_id": e.ref.response_id,
        "item_id": e.ref.item_id,
        "call_id": e.call_id,
        "name": e.name,
        "arguments": e.arguments,
    }


def _malformed_call(e: spb.MalformedFunctionCall, frame: Json) -> Json:
    # The Realtime dialect wraps exactly this event under `event`.
    return dict(frame["event"])


def _playback_acknowledged(e: spb.PlaybackAcknowledged, frame: Json) -> Json:
    # The Realtime dialect wraps this event verbatim under `event`.
    return playback_acknowledged(e)


def _item_deleted(e: spb.ItemDeleted, frame: Json) -> Json:
    return {"type": "conversation.item.deleted", "item_id": e.item_id}


def _item_truncated(e: spb.ItemTruncated, frame: Json) -> Json:
    # The native event is what the Realtime dialect echoes under `event`.
    return dict(frame["event"])


def _error(e: spb.ErrorEvent, frame: Json) -> Json:
    """The flat native shape: `error` is the message; the client's event id is
    `related_event_id` because `event_id` names this server event."""
    return {
        "type": "error",
        "error": e.message,
        "code": e.code,
        "error_type": e.type,
        "param": e.param or None,
        "related_event_id": e.event_id or None,
    }


# EventKind -> its native frame, from its body and its Realtime frame.
_NATIVE: dict[EventKind, Callable[[Any, Json], Json]] = {
    "input_committed": _committed,
    "input_cancelled": _cancelled_input,
    "audio_delta": _audio_delta,
    "text_delta": _text_delta,
    "response_done": _response_done,
    "function_call_arguments_done": _function_call_done,
    "function_call_malformed": _malformed_call,
    "playback_acknowledged": _playback_acknowledged,
    "item_deleted": _item_deleted,
    "item_truncated": _item_truncated,
    "error": _error,
}
