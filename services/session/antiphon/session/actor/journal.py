"""The one writer of a session's events: numbers them, journals them, then sends them.

An event the journal refused is never sent, so what a client saw is always
in the journal a resume replays from. A refusal because another replica
owns the session now (`NotOwnerError`) means this actor must stand down.

What is journaled is the serialized `ServerEvent`, as it is sent: the
journal's format is the wire's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from google.protobuf.message import Message

from antiphon.common.ids import new_id
from antiphon.session.actor.attachment import Attachment, Outbound
from antiphon.session.actor.event_kinds import EventKind, server_event
from antiphon.session.metrics import SessionMetrics
from antiphon.session.state.store import Journal, NotOwnerError
from antiphon.v1 import session_pb2 as spb


class EventLog(Protocol):
    async def append_event(self, session_id: str, token: str, seq: int, payload: bytes) -> None: ...


class Emitter:
    def __init__(
        self,
        *,
        journal: EventLog,
        session_id: str,
        owner_token: str,
        seq: int,
        attachment: Attachment,
        metrics: SessionMetrics,
        on_not_owner: Callable[[], None],
    ) -> None:
        self._journal = journal
        self._session_id = session_id
        self._owner_token = owner_token
        self.seq = seq
        self._attachment = attachment
        self._metrics = metrics
        self._on_not_owner = on_not_owner

    async def emit(self, kind: EventKind, msg: Message) -> None:
        ev = server_event(self.seq + 1, kind, msg)
        try:
            with self._metrics.journal_latency.time():
                await self._journal.append_event(
                    self._session_id, self._owner_token, ev.seq, ev.SerializeToString()
                )
        except NotOwnerError:
            self._on_not_owner()
            raise
        self.seq = ev.seq
        self._metrics.events.labels(kind).inc()
        self._attachment.send(ev)

    async def emit_all(self, events: Iterable[tuple[EventKind, Message]]) -> None:
        for kind, msg in events:
            await self.emit(kind, msg)

    async def error(self, error: spb.ErrorEvent) -> None:
        self._metrics.errors.labels(error.code).inc()
        await self.emit("error", error)


def replay(outbound: Outbound, resumed: spb.SessionResumed, cursor: int, journal: Journal) -> bool:
    """What a resuming stream gets first: `session.resumed` at the client's
    cursor, then every event after it; or, when the journal no longer holds
    them all, `resync_required` (False: the stream must end)."""
    outbound.put_nowait(
        spb.ServerEvent(seq=cursor, event_id=new_id("event"), session_resumed=resumed)
    )
    if journal.missing:
        resync = spb.ResyncRequired(session_id=resumed.session_id, reason=journal.missing)
        outbound.put_nowait(
            spb.ServerEvent(seq=cursor, event_id=new_id("event"), resync_required=resync)
        )
        return False
    for _seq, payload in journal.events:
        outbound.put_nowait(spb.ServerEvent.FromString(payload))
    return True
