"""The stepper of a `mimi` worker with front ends (`duplex_front_ends`): the
decoder's lockstep batch (lockstep.MimiLockstep, as in one process), its rows
filled from shared memory (shared_rows.py), each step's audio handed back.

A session lives in its front end (session.MimiSession: its responses, its
rate, its text marks); here its row is a `RingRow`, which gives the step the
oldest codes in the row's ring and writes the decoded samples into the row's
slot for the step, stamped with the session's token and the frame's place
in its stream. After each step every front end gets one notice.

Row `i` serves sessions of one front end only (the front ends split the rows
once), so that a front end's death frees exactly its rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from antiphon.common.stepper.messages import Failed, Stepped
from antiphon.common.stepper.pod import FrontEndPort
from antiphon.common.stepper.slot_ring import SlotRing
from antiphon.stage1.backends.mimi.crossing import Free, Hold, ToStepper, Wake
from antiphon.stage1.backends.mimi.lockstep import MimiLockstep
from antiphon.stage1.backends.mimi.shared_rows import CodeRing
from antiphon.stage1.frames.session import Pcm


class RingRow:
    """A session's row as the lockstep sees it (frames/lockstep.DecodeRow)."""

    def __init__(self, stepper: Stepper, ring: CodeRing, row: int, token: int) -> None:
        self._stepper = stepper
        self._ring = ring
        self.row = row
        self.token = token

    def queued(self) -> int:
        return self._ring.waiting

    def head_codes(self) -> Sequence[int] | None:
        return self._ring.head(self._stepper.codebooks)  # type: ignore[return-value]

    def decoded(self, pcm: Pcm) -> None:
        self._stepper.decoded(self, self._ring.read, pcm)
        self._ring.pop()


class Stepper:
    def __init__(self, lockstep: MimiLockstep, rings: Sequence[CodeRing], slots: SlotRing) -> None:
        self._lockstep = lockstep
        self._rings = rings
        self._slots = slots
        self.codebooks = lockstep.num_codebooks
        self._ports: dict[int, FrontEndPort] = {}
        # (front end, token) -> its row.
        self._rows: dict[tuple[int, int], RingRow] = {}
        self._step = 0
        lockstep.on_step = self._stepped

    # ------------------------------------------------------- front ends
    def connect(self, front_end: int, port: FrontEndPort) -> None:
        self._ports[front_end] = port

    async def disconnect(self, front_end: int) -> None:
        """The front end is gone: its sessions leave, their rows free."""
        self._ports.pop(front_end, None)
        for key in [key for key in self._rows if key[0] == front_end]:
            row = self._rows.pop(key)
            self._lockstep.release(row.row, row)

    async def apply(self, front_end: int, message: ToStepper) -> None:
        if isinstance(message, Wake):
            self._lockstep.notify()
        elif isinstance(message, Hold):
            ring = self._rings[message.row]
            ring.skip_to(message.mark)
            row = RingRow(self, ring, message.row, message.token)
            self._rows[front_end, message.token] = row
            self._lockstep.hold(message.row, row)
        elif isinstance(message, Free):
            if (held := self._rows.pop((front_end, message.token), None)) is not None:
                self._lockstep.release(held.row, held)

    # ------------------------------------------------------- each step
    def decoded(self, row: RingRow, seq: int, pcm: Pcm) -> None:
        samples = np.ascontiguousarray(pcm, dtype=np.float32)
        self._slots.write(self._step, row.row, row.token, samples, tag=seq)

    def _stepped(self) -> None:
        notice = Stepped(self._step)
        self._step += 1
        for port in self._ports.values():
            port.send(notice)

    def fail(self, message: str) -> None:
        for port in self._ports.values():
            port.send(Failed(message))
