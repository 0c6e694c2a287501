"""What one server event is: a field of `ServerEvent`'s `kind` oneof, typed.

Parts name the event they emit with `EventKind`, so a misspelt kind fails
mypy instead of a session. The names are the proto's field names (they are
also the `events` metric's label), and `tests/session/test_journal.py` pins
them to the descriptor: a kind added to the proto fails that test until it
is added here.
"""

from __future__ import annotations

from typing import Literal

from google.protobuf.message import Message

from antiphon.common.ids import new_id
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
]

# The message type each kind carries, as the descriptor says.
_CARRIES = {
    f.name: f.message_type for f in spb.ServerEvent.DESCRIPTOR.oneofs_by_name["kind"].fields
}


def server_event(seq: int, kind: EventKind, msg: Message) -> spb.ServerEvent:
    """Event `seq` carrying `msg` as its `kind`. TypeError when `msg` is not
    the message type the descriptor gives that field (two kinds share a type,
    e.g. `item_added` and `item_done`, so the kind is still the caller's word)."""
    carries = _CARRIES[kind]
    if carries is None or msg.DESCRIPTOR is not carries:
        raise TypeError(f"{kind} does not carry {msg.DESCRIPTOR.full_name}")
    ev = spb.ServerEvent(seq=seq, event_id=new_id("event"))
    # The one place a kind is used by name: `kind` is a checked oneof field.
    getattr(ev, kind).CopyFrom(msg)
    return ev
