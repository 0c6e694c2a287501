"""A session's response control on its own, for the tests of the session's parts:
events journaled where the test reads them, stage requests recorded, history in
the test's Redis."""

from __future__ import annotations

from google.protobuf.message import Message
from prometheus_client import CollectorRegistry

from antiphon.session.actor.attachment import Attachment
from antiphon.session.actor.event_kinds import EventKind
from antiphon.session.actor.journal import Emitter, EventLog
from antiphon.session.assistant.preemption import Preemption
from antiphon.session.assistant.response_control import ResponseControl
from antiphon.session.config.current_config import CurrentConfig
from antiphon.session.conversation.conversation import Conversation
from antiphon.session.metrics import SessionMetrics
from antiphon.session.stage.stage_links import StageLinks
from antiphon.session.user.turns import Turns
from antiphon.v1 import common_pb2 as cpb


class FlushingEmitter(Emitter):
    """Journals each event as it is made, so a part's test reads each one at
    the step that made it (the actor flushes once per mailbox drain)."""

    async def emit(self, kind: EventKind, msg: Message) -> None:
        await super().emit(kind, msg)
        await self.flush()


def attached_emitter(
    session_id: str, owner_token: str, journal: EventLog, metrics: SessionMetrics
) -> FlushingEmitter:
    """An emitter to `journal` for a session with a stream attached from seq 0."""
    attachment = Attachment(session_id, 0)
    attachment.attach(seq=0)
    return FlushingEmitter(
        journal=journal,
        session_id=session_id,
        owner_token=owner_token,
        seq=0,
        attachment=attachment,
        metrics=metrics,
        on_not_owner=lambda: None,
    )


def response_control(
    *,
    session_id: str,
    owner_token: str,
    config: cpb.SessionConfig,
    journal: EventLog,
    links: StageLinks,
    conversation: Conversation,
    last_item_id: str = "",
) -> ResponseControl:
    """`session_id`'s response control with an attached stream, writing events to `journal`."""
    metrics = SessionMetrics(CollectorRegistry())
    return ResponseControl(
        config=CurrentConfig(session_id, config, max_output_tokens=64),
        emitter=attached_emitter(session_id, owner_token, journal, metrics),
        links=links,
        turns=Turns(session_id, last_item_id=last_item_id),
        conversation=conversation,
        metrics=metrics,
        preemption=Preemption(
            links=links, count=lambda outcome: metrics.preemptive_answers.labels(outcome).inc()
        ),
    )
