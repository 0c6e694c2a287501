"""The stage worker slots a session holds, as it decides them.

A slot goes back when the client is gone (detached: capacity follows the
sockets) and comes back with a resume; a worker that died is replaced by
another, and a stage none would take is tried again at every tick. The
links carry out each change; this part decides when, and records it.
"""

from __future__ import annotations

from antiphon.session.actor.attachment import Attachment
from antiphon.session.actor.journal import Emitter
from antiphon.session.stage.stage_links import StageLinks
from antiphon.v1 import session_pb2 as spb


class StageWorkers:
    def __init__(
        self,
        *,
        links: StageLinks,
        attachment: Attachment,
        emitter: Emitter,
    ) -> None:
        self._links = links
        self._attachment = attachment
        self._emitter = emitter

    async def retry_unbound(self) -> None:
        """Stages whose worker died with none to replace it: try again."""
        for stage, failed in self._links.unbound.items():
            await self.replace(stage, failed)

    async def replace(self, stage: str, failed: str) -> None:
        already_unbound = stage in self._links.unbound
        try:
            await self._links.replace(stage, failed)
        except Exception as exc:
            # Tried again at every tick until a worker of the stage is back;
            # the client is told once, not at every try.
            if not already_unbound:
                await self._emitter.error(
                    spb.ErrorEvent(
                        type="server_error",
                        code="stage_unavailable",
                        message=f"no {stage} worker is available: {exc}",
                    )
                )
            return
        if stage == "stage0" and self._links.model_native:
            # A model-native model's memory of the call (its KV cache) died
            # with its worker: the client is told the model starts afresh,
            # once another worker has really taken the session.
            await self._emitter.error(
                spb.ErrorEvent(
                    type="server_error",
                    code="model_context_reset",
                    message="the model's worker was lost; the conversation goes on "
                    "with a fresh model context (it no longer remembers the call so far)",
                )
            )

    async def replace_lost(self, stage: str, failed: str) -> None:
        """The worker at `failed` died: carry on with another; none while the
        session is detached (nobody to serve: a resume binds a worker again)."""
        if self._attachment.detached:
            await self.release(stage)
            return
        await self.replace(stage, failed)

    async def release(self, stage: str) -> None:
        await self._links.release(stage)

    async def release_if_detached(self, stage: str) -> None:
        """What kept `stage` held while detached is done: its slot goes back now."""
        if self._attachment.detached:
            await self.release(stage)

    async def let_go(self, *, keep_stage0: bool) -> None:
        """Detached: give the slots back (stage0's later, when `keep_stage0`:
        it still owes transcripts), and seek no worker until a resume."""
        self._links.forget_unbound()
        await self.release("stage1")
        if not keep_stage0:
            await self.release("stage0")
