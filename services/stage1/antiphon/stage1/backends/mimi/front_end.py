"""A `mimi` front end's decoder (`duplex_front_ends`): its sessions' rows on a
stepper in another process (stepper.py), as session.Decoder.

The front end is a whole stage1 worker (main.serve: gRPC server, health,
registry entry, metrics) whose sessions (session.MimiSession, as in one
process) write each frame's codes into their row's ring in shared memory
(shared_rows.py) and get its audio from the row's slot when the stepper's
notice for the step comes. It holds bytes, numpy and protobufs: no torch, no
model.

The stepper's loop sleeps while no row has a frame, so a front end wakes it
once a step at most: by a `Wake` after its first frame since it last heard
of a step, and again on a step's notice when a row still has frames
waiting (what it wrote while the step ran).

When the stepper is gone (its pipe ends, or it says its model failed),
every session is told (`engine_failed`) and the front end stops at once: its
streams end UNAVAILABLE and the session service binds them elsewhere.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from antiphon.common.stepper.messages import Stepped
from antiphon.common.stepper.pipe import Link, StepperPipe
from antiphon.stage1.backends import Backend, BackendContext
from antiphon.stage1.backends.mimi.backend import CAPABILITIES
from antiphon.stage1.backends.mimi.crossing import Free, Hold, ToStepper, Wake
from antiphon.stage1.backends.mimi.session import MimiSession
from antiphon.stage1.backends.mimi.shared_rows import (
    CARDINALITY,
    CODEBOOKS,
    CodeRing,
    Layout,
    SharedRows,
)
from antiphon.stage1.frames.lockstep import DecodeRow
from antiphon.stage1.metrics import DuplexMetrics
from antiphon.stage1.service import Emit, SessionFactory

log = logging.getLogger(__name__)


@dataclass
class _Held:
    session: MimiSession
    token: int
    # The place in the row's ring of the session's next frame to come back.
    next: int


class StepperLink(Link[Layout]):
    """A front end's link to its stepper (common/stepper/pipe.Link), and its
    worker's backend on it."""

    def backend(self) -> Backend:
        return Backend(capabilities=CAPABILITIES, open=self.open)

    @contextlib.asynccontextmanager
    async def open(self, context: BackendContext) -> AsyncIterator[SessionFactory]:
        """main.serve's backend: ready once the stepper's model is (its `Ready`)."""
        decoder = FrontEndDecoder(self, DuplexMetrics(context.registry), context.on_failure)
        try:
            await decoder.ready.wait()

            def session(emit: Emit) -> MimiSession:
                return MimiSession(decoder, context.metrics, emit)

            yield session
        finally:
            decoder.close()


class FrontEndDecoder:
    def __init__(
        self, link: StepperLink, metrics: DuplexMetrics, on_failure: Callable[[], None]
    ) -> None:
        self._shared = SharedRows.attach(link.layout)
        self._rings = {row: CodeRing(self._shared, row) for row in link.rows}
        # A stack: a new session takes the row freed last.
        self._free = list(reversed(link.rows))
        self._metrics = metrics
        self._held: dict[int, _Held] = {}
        # Tokens unlike a predecessor's (a front end restarted on the same rows).
        self._tokens = itertools.count(os.getpid() << 24)
        self._woken = False
        self._pipe = StepperPipe(link.conn, self._take, self._tell, on_failure)
        self.ready = self._pipe.ready

    # ------------------------------------------------------- session.Decoder
    @property
    def frame_width(self) -> int:
        return int(self._shared.model[CODEBOOKS])

    @property
    def cardinality(self) -> int:
        return int(self._shared.model[CARDINALITY])

    def acquire(self, row: DecodeRow) -> int | None:
        if not self._free or self._pipe.lost is not None:
            return None
        # Its sessions are MimiSessions (StepperLink.open): what comes back goes to them.
        assert isinstance(row, MimiSession)
        slot = self._free.pop()
        held = _Held(row, next(self._tokens), self._rings[slot].written)
        self._held[slot] = held
        self._send(Hold(held.token, slot, held.next))
        self._metrics.rows_active.set(len(self._held))
        return slot

    def release(self, slot: int, row: DecodeRow) -> None:
        held = self._held.get(slot)
        if held is not None and held.session is row:
            del self._held[slot]
            self._send(Free(held.token, slot))
            self._free.append(slot)
            self._metrics.rows_active.set(len(self._held))

    def framed(self, slot: int, codes: Sequence[int]) -> None:
        self._rings[slot].push(codes)
        if not self._woken:
            self._woken = True
            self._send(Wake())

    def dropped(self) -> None:
        self._metrics.frames.labels(sent="dropped").inc()

    def _send(self, message: ToStepper) -> None:
        self._pipe.send(message)

    def close(self) -> None:
        self._pipe.close()
        self._shared.close()

    # ------------------------------------------------------- from the stepper
    def _take(self, message: Stepped) -> None:
        self._stepped(message.step)

    def _stepped(self, step: int) -> None:
        self._woken = False
        for slot, held in list(self._held.items()):
            got = self._shared.slots.read(step, slot, held.token)
            if got is None:
                continue  # lost: the next frame that comes back says how many
            data, seq = got
            if not data:
                continue
            while held.next < seq:
                held.next += 1
                held.session.lost()
                self._metrics.frames.labels(sent="lost").inc()
            held.next += 1
            sent = held.session.decoded(np.frombuffer(data, np.float32))
            self._metrics.frames.labels(sent="audio" if sent else "silent").inc()
        # What was written while the step ran: the loop may sleep through it.
        if any(self._rings[slot].waiting for slot in self._held):
            self._woken = True
            self._send(Wake())

    def _tell(self, reason: str) -> None:
        for held in self._held.values():
            held.session.engine_lost(reason)
