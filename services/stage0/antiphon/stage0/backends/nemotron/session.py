"""One session's requests on a `nemotron` worker: moshi's duplex session
(audio, commit, cancel and prompt mean the same to both models), with what
goes into the model's function channel: a function's result
(`Stage0ToolOutput`) and text into its running context (`Stage0Context`)."""

from __future__ import annotations

from collections.abc import Callable

from antiphon.stage0.backends.moshi.session import DuplexSession, Prefill
from antiphon.stage0.backends.nemotron.listening import Listening
from antiphon.stage0.backends.nemotron.prompting import TooManyToolsError, tool_response
from antiphon.v1 import stage_pb2 as pb


class NemotronSession(DuplexSession):
    def __init__(
        self,
        listening: Listening,
        emit: Callable[[pb.Stage0Event], None],
        *,
        on_open: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(listening, emit, on_open=on_open)
        self._listening = listening

    def _prefill(self, open_: pb.Stage0Open) -> Prefill:
        model = self._listening.model
        try:
            return model.prefill(open_.instructions, open_.voice, tools=open_.tools)
        except TooManyToolsError as exc:
            self._error(0, "too_many_tools", f"{exc}; the session goes on without tools")
            return model.prefill(open_.instructions, open_.voice)

    def _context(self, msg: pb.Stage0Context) -> None:
        row = self.row
        if row is None:
            self._error(0, "not_open", "context before open", response_id=msg.id)
            return
        model = self._listening.model
        if not model.takes_context:
            message = "this model takes no text into its running context"
            self._error(msg.epoch, "unsupported_capability", message, response_id=msg.id)
            return
        row.epoch = max(row.epoch, msg.epoch)
        taken = pb.ContextTaken(epoch=msg.epoch, id=msg.id)
        if not self._listening.force(row, model.function_tokens(msg.text), taken):
            message = "more text than a session may have waiting to go into the model"
            self._error(msg.epoch, "context_too_long", message, response_id=msg.id)

    def _tool_output(self, msg: pb.Stage0ToolOutput) -> None:
        row = self.row
        model = self._listening.model
        if row is None or not model.calls_tools:
            super()._tool_output(msg)
            return
        row.epoch = max(row.epoch, msg.epoch)
        tokens = model.function_tokens(tool_response(msg.output))
        if not self._listening.force(row, tokens):
            message = "a function result longer than the model may have waiting"
            self._error(msg.epoch, "tool_output_too_long", message, response_id=msg.call_id)
