"""A GPT-Live Responses delegation's answers, on a model-native session.

The voice model (Moshi's architecture) has no tool channel, so the client's
`response.create` (after `response.item.create`s) asks the deployment's
delegate instead: a stage0 worker whose LLM answers turn by turn (the
cascade's, `delegate_addresses`). It is bound for the one answer, prompted
with the session's history (the voice model's own words included) and the
delegation's instructions and tools, and its answer is a text response
with function calls, as a Realtime text response is: the same typed
events, its message and calls placed in the history (where the client's
`function_call_output` items answer them). Its text then goes into the
voice model's context (`ModelContext.say`), so the voice says it.

One delegated answer at a time; a delegate that dies mid-answer fails it
(`response.done` status `failed`), and the next `response.create` binds
another.
"""

from __future__ import annotations

import asyncio
from typing import Any

from antiphon.common.ids import new_id
from antiphon.session.actor import errors
from antiphon.session.actor.journal import Emitter
from antiphon.session.assistant.model_context import ModelContext
from antiphon.session.assistant.responses import ResponseOptions, ResponseState, item_status
from antiphon.session.config import session_config
from antiphon.session.config.current_config import CurrentConfig
from antiphon.session.conversation.conversation import Conversation
from antiphon.session.metrics import SessionMetrics
from antiphon.session.stage.stage_links import Rebind, StageLinks
from antiphon.session.stage.stages import BindError, Binding, StageResult, StreamEnded
from antiphon.session.user.turns import Turns
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2

STAGE = "delegate"


class Delegate:
    def __init__(
        self,
        *,
        config: CurrentConfig,
        emitter: Emitter,
        links: StageLinks,
        turns: Turns,
        conversation: Conversation,
        context: ModelContext,
        rebind: Rebind,
        metrics: SessionMetrics,
    ) -> None:
        self._config = config
        self._emitter = emitter
        self._links = links
        self._turns = turns
        self._conversation = conversation
        self._context = context
        self._rebind = rebind
        self._metrics = metrics
        self._active: ResponseState | None = None
        self._binding: Binding[Any] | None = None
        self._closing: set[asyncio.Future[None]] = set()

    async def create(self, req: spb.CreateResponse) -> None:
        if not self._links.model_native:
            raise errors.invalid(
                "invalid_value",
                "a delegated response is for a model-native session; ask this one directly",
                "type",
            )
        if self._active is not None:
            raise errors.invalid(
                "conversation_already_has_active_response",
                f"a delegated response is in progress: {self._active.id}",
            )
        opts = self._config.requested_options(req)
        request = await self._prompt(opts)
        try:
            binding, _ = await self._rebind(STAGE, "")
        except BindError as exc:
            raise errors.Rejection(
                "server_error", "delegate_unavailable", f"no delegate LLM answers: {exc}"
            ) from exc
        rid = new_id("resp")
        r = ResponseState(
            id=rid,
            item_id=f"item_{rid}",
            session_id=self._config.session_id,
            epoch=self._links.epoch,
            turn_id=self._turns.turn_id,
            previous_item_id=self._turns.last_item_id,
            options=opts,
            delegated=True,
        )
        self._active, self._binding = r, binding
        # Its own session on the delegate's worker: turns by commit, no VAD.
        binding.send(
            stage_pb2.Stage0Request(
                open=stage_pb2.Stage0Open(
                    session_id=f"{self._config.session_id}/delegate",
                    lane=stage_pb2.LANE_MANUAL,
                    skip_vad=True,
                )
            )
        )
        request.response_id = rid
        binding.send(stage_pb2.Stage0Request(generate=request))
        await self._emitter.emit_all(r.created_events())

    async def _prompt(self, opts: ResponseOptions) -> stage_pb2.Generate:
        """The delegate's prompt: the delegation's instructions, then the history."""
        history = await self._conversation.items()
        return opts.request(history, session_config.retention_ratio(self._config.now))

    async def handle(self, result: StageResult | StreamEnded) -> None:
        r = self._active
        if r is None or result.binding is not self._binding:
            return  # an answer that ended already, or its stream closing
        if isinstance(result, StreamEnded):
            await self._finish(r, "failed", "delegate_lost")
            return
        ev: stage_pb2.Stage0Event = result.event
        match ev.WhichOneof("kind"):
            case "delta" if ev.delta.text:
                if not r.opened:
                    await self._emitter.emit_all(r.message_events())
                await self._emitter.emit_all(r.text_events(ev.delta.text))
            case "tool_call":
                declared = {t.name for t in r.options.tools} if r.options.may_call else set()
                if not ev.tool_call.refused and ev.tool_call.call.name in declared:
                    r.add_call(ev.tool_call.call)
            case "done":
                r.metrics.CopyFrom(ev.done.metrics)
                await self._finish(r, "completed")
            case "error":
                await self._emitter.error(
                    spb.ErrorEvent(
                        type="server_error",
                        code=ev.error.code or "delegate_error",
                        message=ev.error.message,
                    )
                )
                await self._finish(r, "failed", ev.error.code or "delegate_error")

    async def _finish(self, r: ResponseState, status: str, reason: str = "") -> None:
        r.settle(status)
        # Last in the history, as it came last: the voice may have spoken
        # (its own items) while the delegate thought.
        placed = [r.item(item_status(status))] if r.opened and status == "completed" else []
        for item in [*placed, *r.calls]:
            await self._conversation.append(item)
            self._turns.item_added(item.id)
        await self._emitter.emit_all(r.terminal_events(status, reason))
        self._metrics.responses.labels(status).inc()
        if status == "completed" and r.text:
            # The voice says the answer (where its model takes text).
            self._context.say(r.text)
        self._active = None
        self.let_go()

    def let_go(self) -> None:
        """Close the delegate's stream without waiting (the answer ended, or
        the session stands down inside a handler)."""
        binding, self._binding = self._binding, None
        if binding is not None:
            # Not awaited: its reader's last post comes back through this actor.
            closing = asyncio.ensure_future(binding.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        self.let_go()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
