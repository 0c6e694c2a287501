"""The stepper of a `moshi` worker with front ends (`duplex_front_ends`): the
model's lockstep batch, the sessions bound to it through the front ends, and
each step's output handed to them.

A session's requests are applied here exactly as the single-process worker
applies them (session.py's DuplexSession, on its row of the one Lockstep);
only their way in and out differs. Its audio is not a request here: the
front end writes it into the row's ring in shared memory (shared_rows.py),
where the step reads it; a request that acts on the audio says where the
ring stood when it was sent (`Request.mark`), so that a commit counts and a
clear drops what came before it, as in the front end's own order. What a
session is told answering a request goes back at once by its front end's
pipe; what a step makes for it goes into its row's slot for that step, and
each front end gets one notice per step.

Row `i` serves sessions of one front end only (the front ends split the rows
once), so that a front end's death frees exactly its rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from antiphon.stage0.backends.moshi.crossing import (
    Events,
    Failed,
    Release,
    Request,
    Stepped,
    ToFrontEnd,
    ToStepper,
)
from antiphon.stage0.backends.moshi.lockstep import Batch, Lockstep
from antiphon.stage0.backends.moshi.session import DuplexSession
from antiphon.stage0.backends.moshi.shared_rows import AudioRing, StepSlots
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)


class FrontEndPort(Protocol):
    """How the stepper reaches one front end (duplex_front_ends.py)."""

    def send(self, message: ToFrontEnd) -> None: ...


@dataclass
class _Bound:
    """A session bound through a front end: its row, and the events it was
    told since they were last handed on (serialized)."""

    token: int
    row: int
    session: DuplexSession | None = None
    pending: list[bytes] = field(default_factory=list)

    def emit(self, event: pb.Stage0Event) -> None:
        self.pending.append(event.SerializeToString())


class Stepper:
    """The clock steps this (clock.Stepped): the Lockstep, plus the front ends."""

    def __init__(
        self,
        lockstep: Lockstep,
        rings: Sequence[AudioRing],
        slots: StepSlots,
        metrics: Stage0Metrics,
    ) -> None:
        self._lockstep = lockstep
        self._rings = rings
        self._slots = slots
        self._metrics = metrics
        self._ports: dict[int, FrontEndPort] = {}
        # (front end, token) -> its session.
        self._sessions: dict[tuple[int, int], _Bound] = {}
        self._step = 0
        # The clock's wake (set once the clock is built on this stepper).
        self.on_open: Callable[[], None] = lambda: None

    # ------------------------------------------------------- front ends
    def connect(self, front_end: int, port: FrontEndPort) -> None:
        self._ports[front_end] = port

    async def disconnect(self, front_end: int) -> None:
        """The front end is gone: its sessions leave, their rows free."""
        self._ports.pop(front_end, None)
        for key in [key for key in self._sessions if key[0] == front_end]:
            await self._close(self._sessions.pop(key))

    async def apply(self, front_end: int, message: ToStepper) -> None:
        """One message from `front_end`, in the order it sent them."""
        key = (front_end, message.token)
        if isinstance(message, Release):
            if (bound := self._sessions.pop(key, None)) is not None:
                await self._close(bound)
            return
        bound = self._sessions.get(key)
        if bound is None:
            bound = self._sessions[key] = _Bound(message.token, message.row)
            bound.session = DuplexSession(
                self._lockstep, bound.emit, on_open=self.on_open, index=message.row
            )
        self._request(bound, message)
        self._hand_on(front_end, bound)

    def _request(self, bound: _Bound, message: Request) -> None:
        assert bound.session is not None
        ring = self._rings[bound.row]
        ring.mark = message.mark
        row = bound.session.row
        if row is not None:
            # What its audio did since the last request, as if it came as requests.
            row.uncommitted_bytes += ring.take_uncommitted()
            row.epoch = max(row.epoch, ring.epoch)
        bound.session.handle(pb.Stage0Request.FromString(message.request))
        if row is None and bound.session.row is not None:
            # Just opened: the row's last session's audio is not this one's.
            ring.clear()
            ring.counted = message.mark

    async def _close(self, bound: _Bound) -> None:
        if bound.session is not None:
            await bound.session.close()

    def _hand_on(self, front_end: int, bound: _Bound) -> None:
        """Its events so far, by the pipe."""
        if bound.pending and (port := self._ports.get(front_end)) is not None:
            port.send(Events(bound.token, bound.pending))
        bound.pending = []

    # ------------------------------------------------------- clock.Stepped
    @property
    def active(self) -> int:
        return self._lockstep.active

    def gather(self) -> Batch:
        batch = self._lockstep.gather()
        dropped = 0
        for row in batch.rows:
            if row is not None:
                ring = self._rings[row.index]
                dropped, ring.dropped_ms = dropped + ring.dropped_ms, 0
        if dropped:
            self._metrics.duplex_dropped_input_ms.inc(dropped)
        return batch

    def compute(self, batch: Batch) -> list[list[int]]:
        return self._lockstep.compute(batch)

    def deliver(self, batch: Batch, tokens: list[list[int]], *, late: bool) -> None:
        for row in batch.rows:
            if row is not None:
                # The epoch its audio came with, as the frame's stamp.
                row.epoch = max(row.epoch, self._rings[row.index].epoch)
        self._lockstep.deliver(batch, tokens, late=late)
        self._step += 1
        step = self._step
        for (front_end, _), bound in self._sessions.items():
            if bound.pending:
                if not self._slots.write(step, bound.row, bound.token, bound.pending):
                    self._hand_on(front_end, bound)  # too big: by the pipe, before the notice
                bound.pending = []
        notice = Stepped(step)
        for port in self._ports.values():
            port.send(notice)

    def fail(self, message: str) -> None:
        self._lockstep.fail(message)
        for (front_end, _), bound in self._sessions.items():
            self._hand_on(front_end, bound)
        for port in self._ports.values():
            port.send(Failed(message))
