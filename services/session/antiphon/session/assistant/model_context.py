"""Text into the running model's context: GPT-Live's appends, and the
delegate's answers for the voice to say.

A model-native backend that takes text (`capabilities.supports_context_text`;
the Moshi architecture forces it into its own text stream, so it says it)
is sent each as a `Stage0Context`, and tells when it took the last token
(`ContextTaken`): the client's append is then `context_appended`. What
waits to be taken is this replica's memory only: a takeover mid-append
leaves it to the new worker's row unsaid and untold, and the client's
`.appended` never comes (docs/gpt-live.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from antiphon.common.ids import new_id
from antiphon.session.actor import errors
from antiphon.session.actor.journal import Emitter
from antiphon.session.stage.stage_links import StageLinks
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2


@dataclass(frozen=True)
class _Pending:
    channel: str  # "" for the session's own (a delegated answer)
    client_event_id: str


class ModelContext:
    def __init__(self, *, links: StageLinks, emitter: Emitter) -> None:
        self._links = links
        self._emitter = emitter
        self._pending: dict[str, _Pending] = {}

    async def append(self, cmd: spb.ClientCommand) -> None:
        """A client's append (`AppendContext`); refused where the backend takes none."""
        caps = self._links.capabilities
        if not caps.supports_context_text:
            raise errors.unsupported(
                cmd.client_type, "supports_context_text", caps.implementation_level
            )
        self._send(cmd.append_context.text, _Pending(cmd.append_context.channel, cmd.event_id))

    def say(self, text: str) -> bool:
        """The session's own text for the model to say; False where it cannot."""
        if not self._links.capabilities.supports_context_text:
            return False
        self._send(text, _Pending("", ""))
        return True

    def owns(self, stage_id: str) -> bool:
        """Whether a stage result's id names one of these (not a response)."""
        return stage_id in self._pending

    def _send(self, text: str, pending: _Pending) -> None:
        context_id = new_id("ctx")
        self._pending[context_id] = pending
        self._links.context(context_id, text)

    async def on_taken(self, msg: stage_pb2.ContextTaken) -> None:
        pending = self._pending.pop(msg.id, None)
        if pending is None or not pending.channel:
            return
        await self._emitter.emit(
            "context_appended",
            spb.ContextAppended(
                channel=pending.channel,
                client_event_id=pending.client_event_id,
                frame_index=msg.index,
            ),
        )

    async def on_error(self, msg: stage_pb2.StageError) -> None:
        """The backend refused one (`response_id` names it): the client is told."""
        pending = self._pending.pop(msg.response_id, None)
        await self._emitter.error(
            spb.ErrorEvent(
                type="invalid_request_error",
                code=msg.code or "context_refused",
                message=msg.message,
                param="content",
                event_id=pending.client_event_id if pending else "",
            )
        )

    def forget(self) -> None:
        """The row it was sent to is gone (another worker, a restart)."""
        self._pending.clear()
