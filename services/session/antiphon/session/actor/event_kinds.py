"""A server event built from its typed kind (`antiphon.common.event_kinds`).

Parts name the event they emit with `EventKind`, so a misspelt kind fails
mypy instead of a session. The names are the proto's field names (they are
also the `events` metric's label).
"""

from __future__ import annotations

from google.protobuf.message import Message

from antiphon.common.event_kinds import EventKind
from antiphon.common.ids import new_id
from antiphon.v1 import session_pb2 as spb

# Re-exported: session parts name kinds through this module.
__all__ = ["EventKind", "server_event"]

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
