"""The parts of a session actor, built and wired to each other.

Each part is the one writer of its facts (see each module); what one needs
of another is handed to it here, once, so the actor's own module is its
loop and the session's life.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from antiphon.session.actor.attachment import Attachment
from antiphon.session.actor.commands import ClientCommands
from antiphon.session.actor.journal import Emitter
from antiphon.session.assistant.delegate import Delegate
from antiphon.session.assistant.model_context import ModelContext
from antiphon.session.assistant.preemption import Preemption
from antiphon.session.assistant.response_control import ResponseControl
from antiphon.session.config.current_config import CurrentConfig
from antiphon.session.conversation.conversation import Conversation
from antiphon.session.conversation.edits import Edits
from antiphon.session.metrics import SessionMetrics
from antiphon.session.settings import SessionSettings
from antiphon.session.stage.stage_events import StageEvents
from antiphon.session.stage.stage_links import Rebind, StageLinks
from antiphon.session.stage.stage_workers import StageWorkers
from antiphon.session.stage.stages import Binding
from antiphon.session.state.snapshot import Snapshot
from antiphon.session.state.store import SessionStore
from antiphon.session.user.listening import Listening
from antiphon.session.user.turns import Turns
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

# A session's two stage bindings, what their workers said of themselves,
# and how to bind a stage again.
Stages = tuple[
    Binding[stage_pb2.Stage0Request],
    Binding[stage_pb2.Stage1Request],
    tuple[stage_pb2.StageInfo, stage_pb2.StageInfo],
    Rebind,
]


@dataclass(frozen=True)
class Parts:
    attachment: Attachment
    emitter: Emitter
    links: StageLinks
    turns: Turns
    responses: ResponseControl
    delegate: Delegate
    listening: Listening
    workers: StageWorkers
    stage_events: StageEvents
    commands: ClientCommands


def wire(
    *,
    snapshot: Snapshot,
    owner_token: str,
    store: SessionStore,
    settings: SessionSettings,
    metrics: SessionMetrics,
    config: CurrentConfig,
    stages: Stages,
    on_not_owner: Callable[[], None],
    state: Callable[[], spb.SessionState],
) -> Parts:
    """The parts of the session `snapshot` describes, as its owner `owner_token`."""
    sid = snapshot.session_id
    stage0, stage1, info, rebind = stages
    attachment = Attachment(
        sid,
        snapshot.attachment,
        max_events=settings.max_outbound_events,
        overflows=metrics.backlog_overflows.labels("outbound"),
    )
    emitter = Emitter(
        journal=store,
        session_id=sid,
        owner_token=owner_token,
        seq=snapshot.seq,
        attachment=attachment,
        metrics=metrics,
        on_not_owner=on_not_owner,
        batched=settings.journal_batching,
    )
    links = StageLinks(
        stage0=stage0,
        stage1=stage1,
        info=info,
        epoch=snapshot.epoch,
        rebind=rebind,
        stage0_open=config.stage0_open,
        stage1_open=config.stage1_open,
    )
    turns = Turns(sid, last_item_id=snapshot.last_item_id, turn_id=snapshot.turn_id)
    conversation = Conversation(store, sid, owner_token)
    responses = ResponseControl(
        config=config,
        emitter=emitter,
        links=links,
        turns=turns,
        conversation=conversation,
        metrics=metrics,
        preemption=Preemption(
            links=links,
            count=lambda outcome: metrics.preemptive_answers.labels(outcome).inc(),
        ),
    )
    context = ModelContext(links=links, emitter=emitter)
    delegate = Delegate(
        config=config,
        emitter=emitter,
        links=links,
        turns=turns,
        conversation=conversation,
        context=context,
        rebind=rebind,
        metrics=metrics,
    )
    listening = Listening(
        config=config,
        settings=settings,
        emitter=emitter,
        links=links,
        turns=turns,
        responses=responses,
        conversation=conversation,
    )
    edits = Edits(
        emitter=emitter,
        links=links,
        turns=turns,
        listening=listening,
        responses=responses,
        conversation=conversation,
    )
    workers = StageWorkers(links=links, attachment=attachment, emitter=emitter)
    stage_events = StageEvents(
        config=config,
        links=links,
        listening=listening,
        responses=responses,
        context=context,
        delegate=delegate,
        workers=workers,
        emitter=emitter,
        metrics=metrics,
    )
    commands = ClientCommands(
        config=config,
        owner_token=owner_token,
        store=store,
        metrics=metrics,
        emitter=emitter,
        links=links,
        listening=listening,
        responses=responses,
        context=context,
        delegate=delegate,
        edits=edits,
        state=state,
    )
    return Parts(
        attachment,
        emitter,
        links,
        turns,
        responses,
        delegate,
        listening,
        workers,
        stage_events,
        commands,
    )
