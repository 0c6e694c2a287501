"""One session's requests on a `moshi` worker, applied to its row of the batch.

The model hears continuously and decides itself when to talk, so most of the
cascade's requests mean little here: audio goes to the row's jitter buffer
(whatever its epoch: the user's voice is not a response's work to fence), a
commit is answered at once with how much was heard (the model does not
transcribe), a generate is nothing (the session hands the model's next
speech to the response it made), and a cancel mutes what is left of the
model's current answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from antiphon.stage0.duplex_lockstep import Lockstep, NoFreeRowError
from antiphon.stage0.duplex_rows import BYTES_PER_MS, Row
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)


class DuplexSession:
    def __init__(
        self,
        lockstep: Lockstep,
        emit: Callable[[pb.Stage0Event], None],
        *,
        on_open: Callable[[], None] = lambda: None,
    ) -> None:
        self._lockstep = lockstep
        self._emit = emit
        self._on_open = on_open
        self._row: Row | None = None
        # The instructions and voice its row was prompted with, and whether
        # that made a prompt at all.
        self._persona = ("", "")
        self._prompted = False

    @property
    def row(self) -> Row | None:
        return self._row

    def handle(self, req: pb.Stage0Request) -> None:
        kind = req.WhichOneof("kind")
        if kind == "open":
            self._open(req.open)
            return
        if kind is None:
            return
        if kind == "configure":
            self._configure(req.configure)
            return
        row = self._row
        if row is None:
            self._error(0, "not_open", f"{kind} before open")
            return
        if kind == "audio":
            row.epoch = max(row.epoch, req.audio.epoch)
            row.uncommitted_bytes += len(req.audio.pcm16)
            self._lockstep.hear(row, req.audio.pcm16)
        elif kind == "commit":
            row.epoch = max(row.epoch, req.commit.epoch)
            # The model heard it as it came; all there is to say is how much.
            audio_ms = row.uncommitted_bytes // BYTES_PER_MS
            row.uncommitted_bytes = 0
            self._emit(
                pb.Stage0Event(
                    transcript=pb.Transcript(
                        epoch=req.commit.epoch,
                        item_id=req.commit.item_id,
                        text="",
                        audio_ms=audio_ms,
                    )
                )
            )
        elif kind == "clear_input":
            if req.clear_input.epoch < row.epoch:
                return  # fenced out: older than what the session said since
            row.epoch = req.clear_input.epoch
            row.audio.clear()
            row.uncommitted_bytes = 0
        elif kind == "generate":
            row.epoch = max(row.epoch, req.generate.epoch)
        elif kind == "cancel":
            if req.cancel.epoch < row.epoch:
                return  # fenced out: a cancel the session has moved past
            row.epoch = req.cancel.epoch
            row.speaking.mute()

    def _configure(self, open_: pb.Stage0Open) -> None:
        """Only the persona and the voice mean anything to the model (its
        prompt); a new one starts the row afresh with it. The rest (lane, turn
        detection) is the model's own business."""
        row = self._row
        if row is None or (open_.instructions, open_.voice) == self._persona:
            return
        self._persona = (open_.instructions, open_.voice)
        prefill = self._lockstep.model.prefill(open_.instructions, open_.voice)
        if not prefill and not self._prompted:
            return  # a model without a prompt (Moshi): nothing changes for it
        self._lockstep.restart(row, prefill)
        self._prompted = bool(prefill)
        log.info(
            "duplex session restarted with a new prompt",
            extra={"session_id": row.session_id, "row": row.index, "prompt_frames": len(prefill)},
        )

    def _open(self, open_: pb.Stage0Open) -> None:
        if self._row is not None:
            return  # already has its row; a second open changes nothing
        # PersonaPlex's voice and instructions, stepped through before the call.
        prefill = self._lockstep.model.prefill(open_.instructions, open_.voice)
        self._persona = (open_.instructions, open_.voice)
        self._prompted = bool(prefill)
        try:
            self._row = self._lockstep.open(self._emit, open_.session_id, prefill)
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

    def _error(self, epoch: int, code: str, message: str) -> None:
        self._emit(pb.Stage0Event(error=pb.StageError(epoch=epoch, code=code, message=message)))

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
