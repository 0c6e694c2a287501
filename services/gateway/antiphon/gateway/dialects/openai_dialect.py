"""OpenAI's own dialect: `/v1/realtime` with no opt-in speaks OpenAI's GA protocol exactly.

Stock clients (the `openai` SDK, the OpenAI Agents SDK, LiveKit Agents,
Pipecat) parse every frame with the `openai` SDK's models, or with strict
copies of them, and drop the frame or end the connection when one does not
parse. So on this dialect:

- only OpenAI's event types go out. A typed event OpenAI has no event for
  (`response.speak`, `response.listen`, `overlap.decision`,
  `playback.acknowledged`, heartbeats, resumes) is not sent; one that ends
  this socket's session (an expiry, a takeover, a journal gap) is told as
  OpenAI's `error` (OpenAI's own `session_expired` for an expiry), and the
  socket closes after it as in every dialect;
- each frame holds OpenAI's fields only, in OpenAI's shapes: no
  `server_event_seq`, no resume token, the session object is OpenAI's GA
  session, `response.metadata` is the client's own string map (echoed from
  `response.create`), `status_details.reason` is one of OpenAI's four and a
  failed response names its cause in `status_details.error`;
- error codes are OpenAI's where OpenAI names the same refusal
  (`input_audio_buffer_commit_empty`, `item_retrieve_invalid_item_id`, ...);
- only OpenAI's client event types are taken (`CLIENT_TYPES`); another is
  refused as OpenAI refuses an unknown type.

OpenAI's order, too: a user item's `conversation.item.added` / `.created`
follow its `input_audio_buffer.committed` (OpenAI names there "the item that
will be created"); the session sends them just before it, in the reference's
order and in one batch, so `OpenAIProjector` holds them until the commit.

The session opens as the socket is accepted (`Dialect.opens_on_connect`).
Each frame is built directly in OpenAI's shape: the events OpenAI shares
with the duplex dialect from `ga_events`, the session, responses and errors
here. Everything this module leaves out is the duplex dialect's (`?duplex=1`,
`projector`): the same typed events, projected with the reference's
extensions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from antiphon.common.audio_formats import G711, PCM16, PCM_OUTPUT_RATE
from antiphon.common.event_kinds import EventKind, body_of, kind_of
from antiphon.gateway.dialects.ga_events import Projection, ga_events
from antiphon.gateway.dialects.shapes import (
    Json,
    audio_output,
    error,
    item,
    truncation,
    turn_detection,
)
from antiphon.gateway.translate.audio_formats import ga_type
from antiphon.gateway.translate.tools import tool_choice_json, tools_json
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

# OpenAI's client event types (the `openai` SDK's `RealtimeClientEvent`).
CLIENT_TYPES = frozenset(
    {
        "session.update",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "conversation.item.create",
        "conversation.item.retrieve",
        "conversation.item.truncate",
        "conversation.item.delete",
        "response.create",
        "response.cancel",
        "output_audio_buffer.clear",
    }
)

# Typed kinds with no OpenAI event and nothing this socket must learn: not
# sent, each for its reason.
NOT_SENT: dict[EventKind, str] = {
    "response_speak": "the audio deltas say it",
    "response_listen": "no response follows: nothing to say",
    "overlap_decision": "its outcome shows (a cancelled response, a later one)",
    "playback_acknowledged": "it answers `playback.ack`, which is not taken here",
    "heartbeat_ack": "it answers `session.heartbeat`, which is not taken here",
    "session_closed": "its socket is gone (a clean close) or never asked",
    "session_resumed": "the gateway's own fail-over: the client carries on",
    "function_call_malformed": "a duplex diagnostic: the reply goes on in speech",
    "context_appended": "it answers a GPT-Live append, which Realtime has not",
}

# Kinds that end this socket's session with no OpenAI event of their own:
# told as an `error` (type, code, message).
_Ending = Callable[[Any], tuple[str, str, str]]
ENDINGS: dict[EventKind, _Ending] = {
    "session_expired": lambda e: (
        "invalid_request_error",
        "session_expired",
        # OpenAI's own words for its 60-minute limit.
        "Your session hit the maximum duration."
        if e.reason == "max_duration_expired"
        else f"The session expired ({e.reason}).",
    ),
    "session_replaced": lambda e: (
        "invalid_request_error",
        "session_replaced",
        "Another connection took this session over.",
    ),
    "resync_required": lambda e: (
        "server_error",
        "session_resync_required",
        f"The session's events could not be replayed ({e.reason}); open a new session.",
    ),
}

# `status_details.reason` of a cancelled response: OpenAI has four. Barge-in
# is OpenAI's `turn_detected`; whatever the client did (a cancel, a cleared
# output, a closed session) is `client_cancelled`. Others have no reason here.
REASONS = {
    "barge_in": "turn_detected",
    "client_cancelled": "client_cancelled",
    "output_audio_cleared": "client_cancelled",
    "input_cancelled": "client_cancelled",
    "session_closed": "client_cancelled",
    "client_disconnected": "client_cancelled",
    "max_output_tokens": "max_output_tokens",
    "content_filter": "content_filter",
}

# Error codes OpenAI names otherwise, for the same refusal.
ERROR_CODES = {"input_audio_buffer_empty": "input_audio_buffer_commit_empty"}
# `item_not_found` is named after the event it answers.
ITEM_NOT_FOUND = {
    "conversation.item.retrieve": "item_retrieve_invalid_item_id",
    "conversation.item.delete": "item_delete_invalid_item_id",
    "conversation.item.truncate": "item_truncate_invalid_item_id",
}

# OpenAI's `audio/pcm` has one rate.
OPENAI_PCM_RATE = PCM_OUTPUT_RATE


class OpenAIProjector:
    """One socket's projection: `project_openai`, in OpenAI's order."""

    def __init__(self) -> None:
        # A user item's `added` / `created` frames, waiting for its commit.
        self._held: list[Json] = []

    def __call__(self, ev: spb.ServerEvent) -> list[Json]:
        frame = project_openai(ev)
        if frame is None:
            return []
        kind = kind_of(ev)
        if kind in ("item_added", "item_created") and _user_message(frame["item"]):
            self._held.append(frame)
            return []
        held, self._held = self._held, []
        if kind == "input_committed" and all(h["item"]["id"] == frame["item_id"] for h in held):
            return [frame, *held]
        return [*held, frame]


def _user_message(it: Json) -> bool:
    return it.get("type") == "message" and it.get("role") == "user"


def project_openai(ev: spb.ServerEvent) -> Json | None:
    """The OpenAI frame of one typed event, or None when OpenAI has none to send."""
    kind = kind_of(ev)
    if kind in NOT_SENT:
        return None
    body = body_of(ev, kind)
    ending = ENDINGS.get(kind)
    if ending is not None:
        type_, code, message = ending(body)
        body = spb.ErrorEvent(type=type_, code=code, message=message)
        kind = "error"
    wire_type, build = _PROJECTIONS[kind]
    return {"type": wire_type, "event_id": ev.event_id, **build(body)}


# ------------------------------------------------------------------ shapes
def session_object(st: spb.SessionState) -> Json:
    """OpenAI's GA session (`realtime.session`), with no duplex key."""
    c = st.config
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": st.session_id,
        "model": c.model,
        "output_modalities": list(c.output_modalities),
        "instructions": c.instructions,
        "audio": {
            "input": {
                "format": audio_format(c.input_audio_format),
                "turn_detection": turn_detection(c.turn_detection),
            },
            "output": audio_output(c, audio_format(c.output_audio_format)),
        },
        "truncation": truncation(c.truncation),
        "tools": tools_json(c.tools),
        "tool_choice": tool_choice_json(c.tool_choice),
        "max_output_tokens": c.max_output_tokens or "inf",
    }


def audio_format(fmt: cpb.AudioFormat) -> Json:
    """OpenAI's format object. OpenAI's PCM is 24 kHz only: another rate (16 kHz
    input, an extension a stock client never asks for) leaves `rate` out."""
    if fmt.encoding in G711:
        return {"type": ga_type(fmt.encoding)}
    if fmt.encoding in ("", PCM16) and fmt.sample_rate_hz == OPENAI_PCM_RATE:
        return {"type": "audio/pcm", "rate": OPENAI_PCM_RATE}
    return {"type": "audio/pcm"}


def response_object(r: spb.Response) -> Json:
    return {
        "object": "realtime.response",
        "id": r.id,
        "status": r.status,
        "status_details": status_details(r),
        "output": [openai_item(i) for i in r.output],
        "output_modalities": list(r.output_modalities),
        # The client's own `response.create` metadata, echoed (LiveKit matches
        # its request by `metadata.client_event_id`); null when it gave none.
        "metadata": dict(r.metadata) or None,
    }


def status_details(r: spb.Response) -> Json | None:
    if r.status == "failed":
        error: Json = {"type": "server_error", "code": r.status_reason or None}
        return {"type": "failed", "error": error}
    if r.status in ("cancelled", "incomplete"):
        return {"type": r.status, "reason": REASONS.get(r.status_reason)}
    return None


def openai_item(it: cpb.Item) -> Json:
    """An item with its content parts typed as OpenAI types them for its role:
    a user's or system's text is `input_text`, the assistant's `output_text`."""
    shaped = item(it)
    if it.type != "message":
        return shaped
    return {**shaped, "content": [_part(p, it.role) for p in shaped["content"]]}


def _part(part: Json, role: str) -> Json:
    kind = part.get("type")
    if kind in ("text", "input_text", "output_text"):
        return {**part, "type": "output_text" if role == "assistant" else "input_text"}
    if kind == "audio" and role == "assistant":
        return {**part, "type": "output_audio"}
    return part


def error_code(e: spb.ErrorEvent) -> str:
    if e.code == "item_not_found" and e.client_type in ITEM_NOT_FOUND:
        return ITEM_NOT_FOUND[e.client_type]
    return ERROR_CODES.get(e.code, e.code)


def _response(e: spb.ResponseEvent) -> Json:
    return {"response": response_object(e.response)}


_PROJECTIONS: dict[EventKind, Projection] = {
    **ga_events(openai_item),
    "session_created": ("session.created", lambda st: {"session": session_object(st)}),
    "session_updated": ("session.updated", lambda st: {"session": session_object(st)}),
    "response_created": ("response.created", _response),
    "response_done": ("response.done", _response),
    "error": ("error", lambda e: {"error": error(e, error_code(e))}),
}
