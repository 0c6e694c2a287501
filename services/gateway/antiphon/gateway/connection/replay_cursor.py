"""Which session one socket follows, and the last of its events the socket delivered.

Together they are what a resume on another replica says (`resume`): the
session's journal replays every event after the cursor, so the client
gets each event once, none skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from antiphon.common.event_kinds import EventKind
from antiphon.v1 import session_pb2 as spb

# Attachment-scoped events carry a cursor, not a journal position.
NOT_JOURNALED = frozenset({"session_resumed", "session_replaced", "resync_required"})


@dataclass
class Identity:
    """What this socket needs to resume its session elsewhere."""

    session_id: str
    incarnation: int
    resume_token: str


class ReplayCursor:
    def __init__(self) -> None:
        self.identity: Identity | None = None
        self.delivered_seq = 0

    def note(self, ev: spb.ServerEvent, kind: EventKind) -> None:
        """`ev` is being delivered to the client."""
        if kind == "session_created":
            st = ev.session_created
            self.identity = Identity(st.session_id, st.incarnation, st.resume_token)
        elif kind == "session_resumed":
            r = ev.session_resumed
            if self.identity is None:
                # The client's own `session.resume`: this socket can fail over
                # too, from the cursor the client said it holds (this event's seq).
                self.identity = Identity(r.session_id, r.incarnation, r.resume_token)
                self.delivered_seq = ev.seq
            self.identity.resume_token = r.resume_token
        if kind not in NOT_JOURNALED:
            self.delivered_seq = max(self.delivered_seq, ev.seq)

    def resume(self) -> spb.ClientCommand | None:
        """The command that resumes the session after the last delivered
        event; None while no session was opened (nothing to resume)."""
        if self.identity is None:
            return None
        return spb.ClientCommand(
            client_type="session.resume",
            resume=spb.ResumeSession(
                session_id=self.identity.session_id,
                incarnation=self.identity.incarnation,
                resume_token=self.identity.resume_token,
                last_received_seq=self.delivered_seq,
            ),
        )
