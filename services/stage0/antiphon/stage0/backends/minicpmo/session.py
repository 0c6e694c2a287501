"""One session's requests on a `minicpmo` worker.

Its audio is cut into one-second units, which the thinker hears in order,
one at a time; each answer is a `ModelFrame` (the unit's index, its
decision, its text and text tokens). As on the other model-native workers
(moshi/session.py) a commit is answered with how much was heard, a generate
is nothing and a cancel mutes: the rest of the model's turn goes out as
listening. Units queue while the thinker is busy, up to `jitter_ms` of
them; past that the oldest is dropped and the next frame says it was late.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

import numpy as np
from PIL import Image

from antiphon.stage0.backends.minicpmo import frames
from antiphon.stage0.backends.minicpmo.backend import SAMPLE_RATE, UNIT_MS
from antiphon.stage0.backends.minicpmo.thinker import Thinker, ThinkerSession, Unit
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)

_BYTES_PER_MS = SAMPLE_RATE * 2 // 1000
UNIT_BYTES = UNIT_MS * _BYTES_PER_MS


class MiniCPMoSession:
    def __init__(
        self,
        thinker: Thinker,
        emit: Callable[[pb.Stage0Event], None],
        metrics: Stage0Metrics,
        *,
        jitter_ms: int,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self._thinker = thinker
        # The engine died under the session: no session of this worker can
        # be heard any more, so the worker stops and its sessions move.
        self._on_failure = on_failure
        self._metrics = metrics
        self._emit = emit
        self._session: ThinkerSession | None = None
        self._session_id = ""
        self._epoch = 0
        self._pending = bytearray()  # audio short of a unit
        # Units waiting for the thinker: (audio, its frame, when it closed).
        self._units: deque[tuple[bytes, Image.Image | None, float]] = deque()
        # The frame that rode the appends since the last unit closed.
        self._frame: Image.Image | None = None
        self._queued = max(1, jitter_ms // UNIT_MS)
        self._ready = asyncio.Event()
        self._hearing: asyncio.Task[None] | None = None
        self._index = 0
        self._late = False
        self._muted = False
        self._uncommitted = 0

    def handle(self, req: pb.Stage0Request) -> None:
        # `configure` changes nothing: the prompt is the open's, and the lane
        # and turn detection are the model's own business.
        kind = req.WhichOneof("kind") or ""
        if kind == "open":
            self._open(req.open)
        elif self._session is None:
            self._error(0, "not_open", f"{kind} before open")
        elif kind == "audio":
            self._audio(req.audio)
        elif kind == "commit":
            self._commit(req.commit)
        elif kind == "clear_input":
            self._clear_input(req.clear_input)
        elif kind == "cancel":
            self._cancel(req.cancel)
        elif kind == "generate":
            # The model decides itself when to speak.
            self._epoch = max(self._epoch, req.generate.epoch)
        elif kind == "context":
            message = "this model takes no text into its running context"
            self._error(req.context.epoch, "unsupported_capability", message, req.context.id)
        elif kind == "tool_output":
            message = "this model calls no tools and takes no function results"
            self._error(
                req.tool_output.epoch, "unsupported_capability", message, req.tool_output.call_id
            )

    def _open(self, open_: pb.Stage0Open) -> None:
        if self._session is not None:
            return
        self._session_id = open_.session_id
        self._session = self._thinker.open(open_.instructions)
        self._hearing = asyncio.create_task(self._hear())
        self._metrics.duplex_rows_active.inc()
        log.info("minicpmo session opened", extra={"session_id": self._session_id})

    def _audio(self, msg: pb.Stage0Audio) -> None:
        self._epoch = max(self._epoch, msg.epoch)
        if msg.video_frames:
            self._take_frame(msg)
        self._uncommitted += len(msg.pcm16)
        self._pending += msg.pcm16
        while len(self._pending) >= UNIT_BYTES:
            if len(self._units) >= self._queued:
                self._units.popleft()  # the thinker fell behind: the oldest goes
                self._metrics.duplex_dropped_input_ms.inc(UNIT_MS)
                self._late = True
            unit = (bytes(self._pending[:UNIT_BYTES]), self._frame, time.monotonic())
            self._units.append(unit)
            self._frame = None
            del self._pending[:UNIT_BYTES]
            self._ready.set()

    def _take_frame(self, msg: pb.Stage0Audio) -> None:
        """The append's first frame is the unit's (a second one, a composite of
        earlier frames, is not read); a later one before the unit closes
        replaces it."""
        try:
            self._frame = frames.decoded(
                msg.video_frames[0], msg.max_slice_nums, self._thinker.scale_resolution
            )
        except frames.InvalidImageError as exc:
            self._error(msg.epoch, "invalid_image", f"video_frames[0]: {exc}")

    def _commit(self, msg: pb.Stage0Commit) -> None:
        self._epoch = max(self._epoch, msg.epoch)
        audio_ms = self._uncommitted // _BYTES_PER_MS
        self._uncommitted = 0
        transcript = pb.Transcript(epoch=msg.epoch, item_id=msg.item_id, text="", audio_ms=audio_ms)
        self._emit(pb.Stage0Event(transcript=transcript))

    def _clear_input(self, msg: pb.Stage0ClearInput) -> None:
        if msg.epoch < self._epoch:
            return  # fenced out: older than what the session said since
        self._epoch = msg.epoch
        self._pending.clear()
        self._frame = None  # it rode audio that is gone
        self._uncommitted = 0

    def _cancel(self, msg: pb.Stage0Cancel) -> None:
        if msg.epoch < self._epoch:
            return  # fenced out: a cancel the session has moved past
        self._epoch = msg.epoch
        self._muted = True

    async def _hear(self) -> None:
        session = self._session
        assert session is not None
        while True:
            while not self._units:
                self._ready.clear()
                await self._ready.wait()
            pcm, picture, closed = self._units.popleft()
            audio = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0
            restarts = session.restarts
            try:
                answer = await session.hear(Unit(audio, picture))
            except Exception as exc:
                log.exception("the thinker failed a unit", extra={"session_id": self._session_id})
                self._error(self._epoch, "model_error", f"the model failed: {exc}")
                if self._thinker.engine.errored:
                    self._on_failure()
                return
            self._metrics.duplex_unit.observe(time.monotonic() - closed)
            if session.restarts > restarts:
                self._metrics.duplex_context_restarts.inc()
                log.info(
                    "minicpmo session's context full: started afresh",
                    extra={"session_id": self._session_id, "unit": self._index},
                )
            if self._late:
                self._metrics.duplex_late_frames.inc()
            speak = answer.speak and not self._muted
            if self._muted and (answer.turn_ended or not answer.speak):
                self._muted = False  # the muted turn is over: the next may speak
            tokens = answer.text if speak else ()
            frame = pb.ModelFrame(
                epoch=self._epoch,
                index=self._index,
                text=self._thinker.text(tokens),
                decision=pb.DECISION_SPEAK if speak else pb.DECISION_LISTEN,
                late=self._late,
                tokens=tokens,
                turn_ended=speak and answer.turn_ended,
            )
            self._index += 1
            self._late = False
            self._emit(pb.Stage0Event(frame=frame))

    def _error(self, epoch: int, code: str, message: str, response_id: str = "") -> None:
        error = pb.StageError(epoch=epoch, response_id=response_id, code=code, message=message)
        self._emit(pb.Stage0Event(error=error))

    async def close(self) -> None:
        if self._hearing is not None:
            self._hearing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._hearing
            self._hearing = None
        if self._session is not None:
            await self._session.close()
            self._metrics.duplex_rows_active.dec()
            log.info(
                "minicpmo session closed",
                extra={"session_id": self._session_id, "units": self._index},
            )
            self._session = None
