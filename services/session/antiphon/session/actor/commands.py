"""A client's commands, each handed to the part it is for.

The actor passes each command here in mailbox order, once it is known to
come from the attached stream; the commands that end or detach the
session (`close`, `client_gone`) stay with the actor, which owns the
session's life. A part refuses a command by raising `Rejection` before it
changes anything.
"""

from __future__ import annotations

from collections.abc import Callable

from antiphon.session.actor import errors
from antiphon.session.actor.journal import Emitter
from antiphon.session.assistant.delegate import Delegate
from antiphon.session.assistant.model_context import ModelContext
from antiphon.session.assistant.response_control import ResponseControl
from antiphon.session.config import policy
from antiphon.session.config.current_config import CurrentConfig
from antiphon.session.conversation.edits import Edits
from antiphon.session.metrics import SessionMetrics
from antiphon.session.stage.stage_links import StageLinks
from antiphon.session.state.store import SessionStore
from antiphon.session.user.listening import Listening
from antiphon.v1 import session_pb2 as spb


class ClientCommands:
    def __init__(
        self,
        *,
        config: CurrentConfig,
        owner_token: str,
        store: SessionStore,
        metrics: SessionMetrics,
        emitter: Emitter,
        links: StageLinks,
        listening: Listening,
        responses: ResponseControl,
        context: ModelContext,
        delegate: Delegate,
        edits: Edits,
        state: Callable[[], spb.SessionState],
    ) -> None:
        self._config = config
        self._owner_token = owner_token
        self._store = store
        self._metrics = metrics
        self._emitter = emitter
        self._links = links
        self._listening = listening
        self._responses = responses
        self._context = context
        self._delegate = delegate
        self._edits = edits
        self._state = state

    async def handle(self, cmd: spb.ClientCommand) -> None:
        kind = cmd.WhichOneof("kind")
        match kind:
            case "append_audio":
                with self._metrics.append_latency.time():
                    await self._append(cmd)
            case "commit":
                await self._listening.commit(cmd.commit)
            case "clear_input":
                await self._listening.clear()
            case "cancel_input":
                await self._listening.cancel()
            case "append_text":
                self._listening.append_text(cmd.append_text.text)
            case "create_item" | "retrieve_item" | "delete_item" | "truncate_item":
                await self._edits.item_command(cmd)
            case "clear_output_audio":
                await self._responses.clear_output_audio()
            case "barge_in":
                self._require_barge_in(cmd)
                await self._responses.barge_in(cmd.barge_in.source)
            case "playback_ack":
                await self._edits.playback_ack(cmd.playback_ack)
            case "update":
                await self._update(cmd)
            case "create_response" if cmd.create_response.delegated:
                await self._delegate.create(cmd.create_response)
            case "create_response":
                await self._responses.create(cmd.create_response)
            case "append_context":
                await self._context.append(cmd)
            case "cancel_response":
                await self._responses.cancel(cmd.cancel_response.response_id)
            case "heartbeat":
                # Any command refreshes the idle lease; this one only does that.
                await self._emitter.emit(
                    "heartbeat_ack", spb.HeartbeatAck(session_id=self._config.session_id)
                )
            case "event_ack":
                await self._store.trim_acked(
                    self._config.session_id, self._owner_token, cmd.event_ack.seq
                )
            case "rejected":
                # Refused at the gateway; journaled here so it keeps its place.
                await self._emitter.error(cmd.rejected)
            case _:
                raise errors.invalid("invalid_event", f"unexpected command {kind}")

    def _require_barge_in(self, cmd: spb.ClientCommand) -> None:
        caps = self._links.capabilities
        if not caps.supports_barge_in:
            raise errors.unsupported(
                cmd.client_type, "supports_barge_in", caps.implementation_level
            )

    async def _append(self, cmd: spb.ClientCommand) -> None:
        if cmd.operation_id and not await self._store.record_operation(
            self._config.session_id, self._owner_token, cmd.operation_id
        ):
            # A retry of an append already applied: its result was nothing, so
            # the cached result is nothing too.
            self._metrics.duplicates.inc()
            return
        self._listening.append(cmd.append_audio)

    async def _update(self, cmd: spb.ClientCommand) -> None:
        merged = self._config.merged(cmd.update.config)
        if merged.overlap_policy == policy.BARGE_IN:
            self._require_barge_in(cmd)
        lane_changed = self._config.adopt(merged)
        await self._store.set_fields(
            self._config.session_id, self._owner_token, {"config": merged.SerializeToString()}
        )
        patch = cmd.update.config
        # A model-native model is prompted with the persona and voice at open
        # (PersonaPlex), and its tools where it calls them (Nemotron
        # VoiceChat): a new one starts it afresh with them.
        persona = self._links.model_native and (
            patch.HasField("instructions")
            or patch.HasField("voice")
            or (patch.has_tools and self._links.capabilities.supports_tool_calls)
        )
        if lane_changed or persona or patch.has_turn_detection or patch.HasField("overlap_policy"):
            self._links.configure()
        await self._emitter.emit("session_updated", self._state())
