"""The kinds of typed server event: the cases of `ServerEvent`'s `kind` oneof.

The protos own the list; `EventKind` spells it for mypy, so a session part
that emits a kind, or a dialect's table keyed by kind, fails type-checking on
a typo. Shared by the session service (which emits events) and the gateway
(which projects them). An event's kind is read in one place (`kind_of`),
against the same list, and `tests/common/test_event_kinds.py` pins
`EventKind` to the descriptor: a kind the protos gain fails that test until
it is spelled here, and then `tests/gateway/test_dialect.py` until each
dialect projects it or says why it does not send it.
"""

from __future__ import annotations

from typing import Any, Literal, TypeGuard, get_args

from antiphon.v1 import session_pb2 as spb

EventKind = Literal[
    "session_created",
    "session_updated",
    "session_closed",
    "heartbeat_ack",
    "error",
    "session_resumed",
    "session_replaced",
    "session_expired",
    "resync_required",
    "speech_started",
    "speech_stopped",
    "input_committed",
    "input_cleared",
    "item_added",
    "item_created",
    "item_done",
    "transcription_completed",
    "response_created",
    "output_item_added",
    "content_part_added",
    "response_speak",
    "audio_delta",
    "audio_transcript_delta",
    "text_delta",
    "audio_done",
    "audio_transcript_done",
    "text_done",
    "content_part_done",
    "output_item_done",
    "response_done",
    "rate_limits_updated",
    "response_listen",
    "item_deleted",
    "item_retrieved",
    "item_truncated",
    "output_audio_cleared",
    "playback_acknowledged",
    "overlap_decision",
    "input_cancelled",
    "function_call_arguments_delta",
    "function_call_arguments_done",
    "function_call_malformed",
    "transcription_delta",
    "context_appended",
]
KINDS: tuple[EventKind, ...] = get_args(EventKind)


def _is_kind(name: str) -> TypeGuard[EventKind]:
    return name in KINDS


def kind_of(ev: spb.ServerEvent) -> EventKind:
    """The event's kind; raises ValueError for an event without one."""
    name = ev.WhichOneof("kind")
    if name is None:
        raise ValueError("server event without a kind")
    if not _is_kind(name):
        raise ValueError(f"server event kind {name!r} is not spelled in `EventKind`")
    return name


def body_of(ev: spb.ServerEvent, kind: EventKind) -> Any:
    """The message the event carries as `kind` (its type varies with the kind)."""
    return getattr(ev, kind)
