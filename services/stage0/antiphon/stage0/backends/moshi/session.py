"""One session's requests on a `moshi` worker, applied to its row of the batch.

The model hears continuously and decides itself when to talk, so most of the
cascade's requests mean little here: audio goes to the row's jitter buffer
(whatever its epoch: the user's voice is not a response's work to fence), a
commit is answered at once with how much was heard (the model does not
transcribe), a generate is nothing (the session hands the model's next
speech to the response it made), a cancel mutes what is left of the
model's current answer, and a context's text is queued to go into the
model's own text stream (context.py), which it then says.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from antiphon.stage0.backends.moshi.lockstep import NoFreeRowError
from antiphon.stage0.backends.moshi.rows import Row
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1.common_pb2 import Tool

log = logging.getLogger(__name__)

# A model's prompt as the steps its row takes before the call: moshi's
# ForcedFrames, nemotron's token ids.
Prefill = Sequence[Any]


class Prompted(Protocol):
    """What a session asks of the model itself: its prompt, whether text goes
    into its running context (`supports_context_text`), that text's words,
    and whether it calls tools (then they are part of its prompt)."""

    @property
    def calls_tools(self) -> bool: ...

    @property
    def takes_context(self) -> bool: ...

    def prefill(self, instructions: str, voice: str, tools: Sequence[Tool] = ()) -> Prefill: ...

    def words(self, text: str) -> list[list[int]]: ...


class Rows(Protocol):
    """The batch a session takes a row of: `moshi`'s Lockstep, or another
    duplex model's (`nemotron`'s Listening)."""

    @property
    def model(self) -> Prompted: ...

    def open(
        self,
        emit: Callable[[pb.Stage0Event], None],
        session_id: str = "",
        prefill: Prefill = (),
        *,
        index: int | None = None,
    ) -> Row: ...

    def restart(self, row: Row, prefill: Prefill = ()) -> None: ...

    def release(self, row: Row) -> None: ...

    def hear(self, row: Row, pcm16: bytes) -> None: ...

    def next_frame(self, row: Row) -> int: ...


class DuplexSession:
    def __init__(
        self,
        lockstep: Rows,
        emit: Callable[[pb.Stage0Event], None],
        *,
        on_open: Callable[[], None] = lambda: None,
        index: int | None = None,
    ) -> None:
        self._lockstep = lockstep
        # Its row, where the caller owns which (a stepper's front end); None: any free one.
        self._index = index
        self._emit = emit
        self._on_open = on_open
        self._row: Row | None = None
        # The instructions and voice its row was prompted with, and whether
        # that made a prompt at all.
        self._persona = self._persona_of(pb.Stage0Open())
        self._prompted = False

    @property
    def row(self) -> Row | None:
        return self._row

    def handle(self, req: pb.Stage0Request) -> None:
        handler = HANDLERS.get(req.WhichOneof("kind") or "")
        if handler is not None:
            handler(self, req)

    def _opened(self, kind: str) -> Row | None:
        """The session's row; None (and the session told) before it opened."""
        if self._row is None:
            self._error(0, "not_open", f"{kind} before open")
        return self._row

    def _audio(self, msg: pb.Stage0Audio) -> None:
        if (row := self._opened("audio")) is None:
            return
        row.epoch = max(row.epoch, msg.epoch)
        row.uncommitted_bytes += len(msg.pcm16)
        self._lockstep.hear(row, msg.pcm16)

    def _commit(self, msg: pb.Stage0Commit) -> None:
        if (row := self._opened("commit")) is None:
            return
        row.epoch = max(row.epoch, msg.epoch)
        # The model heard it as it came; all there is to say is how much.
        audio_ms = row.uncommitted_bytes // row.bytes_per_ms
        row.uncommitted_bytes = 0
        self._emit(
            pb.Stage0Event(
                transcript=pb.Transcript(
                    epoch=msg.epoch, item_id=msg.item_id, text="", audio_ms=audio_ms
                )
            )
        )

    def _clear_input(self, msg: pb.Stage0ClearInput) -> None:
        if (row := self._opened("clear_input")) is None:
            return
        if msg.epoch < row.epoch:
            return  # fenced out: older than what the session said since
        row.epoch = msg.epoch
        row.audio.clear()
        row.uncommitted_bytes = 0

    def _generate(self, msg: pb.Generate) -> None:
        if (row := self._opened("generate")) is not None:
            row.epoch = max(row.epoch, msg.epoch)

    def _cancel(self, msg: pb.Stage0Cancel) -> None:
        if (row := self._opened("cancel")) is None:
            return
        if msg.epoch < row.epoch:
            return  # fenced out: a cancel the session has moved past
        row.epoch = msg.epoch
        row.speaking.mute()

    def _context(self, msg: pb.Stage0Context) -> None:
        """Queue the text for the row's text stream, behind what waits; with
        nothing to say and nothing waiting it is in at once (the next frame)."""
        row = self._row
        if row is None:
            self._error(0, "not_open", "context before open", response_id=msg.id)
            return
        row.epoch = max(row.epoch, msg.epoch)
        if not self._lockstep.model.takes_context:
            message = "this model takes no text into its running context"
            self._error(msg.epoch, "unsupported_capability", message, response_id=msg.id)
            return
        tokens = self._lockstep.model.words(msg.text)
        if not tokens and not row.context:
            index = self._lockstep.next_frame(row)
            taken = pb.ContextTaken(epoch=msg.epoch, id=msg.id, index=index)
            self._emit(pb.Stage0Event(context_taken=taken))
        elif not row.context.push(msg.epoch, msg.id, tokens):
            count = sum(len(word) for word in tokens)
            self._error(
                msg.epoch,
                "context_too_long",
                f"{count} text tokens with {row.context.queued} queued: more than the "
                f"{row.context.limit} a session may have waiting",
                response_id=msg.id,
            )

    def _configure(self, open_: pb.Stage0Open) -> None:
        """Only the persona and the voice mean anything to the model (its
        prompt); a new one starts the row afresh with it. The rest (lane, turn
        detection) is the model's own business."""
        row = self._row
        if row is None or self._persona_of(open_) == self._persona:
            return
        self._persona = self._persona_of(open_)
        prefill = self._prefill(open_)
        if not prefill and not self._prompted:
            return  # a model without a prompt (Moshi): nothing changes for it
        self._lockstep.restart(row, prefill)
        self._prompted = bool(prefill)
        log.info(
            "duplex session restarted with a new prompt",
            extra={"session_id": row.session_id, "row": row.index, "prompt_frames": len(prefill)},
        )

    def _persona_of(self, open_: pb.Stage0Open) -> tuple[object, ...]:
        """What of an open the row's prompt is made of: a new one restarts it."""
        if not self._lockstep.model.calls_tools:
            return (open_.instructions, open_.voice)
        tools = tuple((t.name, t.description, t.parameters) for t in open_.tools)
        return (open_.instructions, open_.voice, tools)

    def _prefill(self, open_: pb.Stage0Open) -> Prefill:
        return self._lockstep.model.prefill(open_.instructions, open_.voice, tools=open_.tools)

    def _tool_output(self, msg: pb.Stage0ToolOutput) -> None:
        """A function's result: this model calls no tools."""
        message = "this model calls no tools and takes no function results"
        self._error(msg.epoch, "unsupported_capability", message, response_id=msg.call_id)

    def _open(self, open_: pb.Stage0Open) -> None:
        if self._row is not None:
            return  # already has its row; a second open changes nothing
        # PersonaPlex's voice and instructions, stepped through before the call.
        prefill = self._prefill(open_)
        self._persona = self._persona_of(open_)
        self._prompted = bool(prefill)
        try:
            self._row = self._lockstep.open(
                self._emit, open_.session_id, prefill, index=self._index
            )
        except NoFreeRowError as exc:
            log.error("no free row", extra={"session_id": open_.session_id})
            self._error(0, "capacity_exceeded", str(exc))
            return
        log.info(
            "duplex session opened",
            extra={
                "session_id": open_.session_id,
                "row": self._row.index,
                "prompt_frames": len(prefill),
            },
        )
        self._on_open()

    def _error(self, epoch: int, code: str, message: str, *, response_id: str = "") -> None:
        error = pb.StageError(epoch=epoch, response_id=response_id, code=code, message=message)
        self._emit(pb.Stage0Event(error=error))

    async def close(self) -> None:
        if self._row is not None:
            self._lockstep.release(self._row)
            log.info(
                "duplex session closed",
                extra={
                    "session_id": self._row.session_id,
                    "row": self._row.index,
                    "frames": self._row.frames,
                },
            )
            self._row = None


# What each request does, by its oneof field; tests/stage0/test_request_kinds.py
# holds the keys to the proto, mypy each field to its handler's type.
HANDLERS: Final[Mapping[str, Callable[[DuplexSession, pb.Stage0Request], None]]] = {
    "open": lambda s, req: s._open(req.open),
    "configure": lambda s, req: s._configure(req.configure),
    "audio": lambda s, req: s._audio(req.audio),
    "commit": lambda s, req: s._commit(req.commit),
    "clear_input": lambda s, req: s._clear_input(req.clear_input),
    "generate": lambda s, req: s._generate(req.generate),
    "cancel": lambda s, req: s._cancel(req.cancel),
    "context": lambda s, req: s._context(req.context),
    "tool_output": lambda s, req: s._tool_output(req.tool_output),
}
# Kinds this backend has nothing to do with, and why.
IGNORED: Final[Mapping[str, str]] = {
    "cancel_response": "a model-native session is never asked for a preemptive answer",
}
