"""The one writer of a session's events: numbers them, journals them, then sends them.

Events are numbered as they are made and held until the actor flushes, once
per mailbox drain: every event of the drain goes to the journal, and the
session's snapshot after them, in one pipelined round trip; only then are
they sent, in order. An event the journal refused is never sent, so what a
client saw is always in the journal a resume replays from. A refusal
because another replica owns the session now (`NotOwnerError`) means this
actor must stand down.

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

Fields = dict[str, bytes | str]


class EventLog(Protocol):
    async def commit(
        self,
        session_id: str,
        token: str,
        events: list[tuple[int, bytes]],
        fields: Fields | None = None,
    ) -> None: ...


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
        batched: bool = True,
    ) -> None:
        self._journal = journal
        # Off: a round trip per event, as before the drains were batched
        # (`journal_batching`; bench.journal compares the two).
        self._batched = batched
        self._session_id = session_id
        self._owner_token = owner_token
        # The last event numbered, and the last one the journal holds.
        self.seq = seq
        self.journaled_seq = seq
        self._held: list[spb.ServerEvent] = []
        self._attachment = attachment
        self._metrics = metrics
        self._on_not_owner = on_not_owner

    async def emit(self, kind: EventKind, msg: Message) -> None:
        """Number the event and hold it for the next flush."""
        ev = server_event(self.seq + 1, kind, msg)
        self.seq = ev.seq
        self._held.append(ev)
        self._metrics.events.labels(kind).inc()

    async def emit_all(self, events: Iterable[tuple[EventKind, Message]]) -> None:
        for kind, msg in events:
            await self.emit(kind, msg)

    async def error(self, error: spb.ErrorEvent) -> None:
        self._metrics.errors.labels(error.code).inc()
        await self.emit("error", error)

    async def flush(self, fields: Fields | None = None) -> None:
        """Journal the held events and write `fields` (the snapshot, when it
        changed), in one round trip; then send the events, in order."""
        if not self._held and not fields:
            return
        if self._batched or len(self._held) <= 1:
            await self._commit(list(self._held), fields)
            return
        while self._held:
            await self._commit(self._held[:1], fields if len(self._held) == 1 else None)

    async def _commit(self, events: list[spb.ServerEvent], fields: Fields | None) -> None:
        """One round trip: `events` (the first held) journaled, then sent."""
        try:
            with self._metrics.journal_latency.time():
                await self._journal.commit(
                    self._session_id,
                    self._owner_token,
                    [(ev.seq, ev.SerializeToString()) for ev in events],
                    fields,
                )
        except NotOwnerError:
            self._on_not_owner()
            raise
        del self._held[: len(events)]
        if events:
            self.journaled_seq = events[-1].seq
            self._metrics.journal_batch.observe(len(events))
        for ev in events:
            self._attachment.send(ev)

    def drop_held(self) -> int:
        """Forget the events not journaled (the session cannot go on here);
        how many there were. Nobody saw them, so no client misses them."""
        dropped, self._held = len(self._held), []
        self.seq = self.journaled_seq
        return dropped


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
