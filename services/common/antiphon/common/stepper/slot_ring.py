"""Each row's output of a step in shared memory, kept for a few steps: the
stepper writes a row's slot for a step, and a front end reads it when the
step's notice comes (stage0's frames' events, stage1's decoded audio).

Slots form a ring of `depth` steps: a front end that falls that far behind
finds a slot stamped with a later step and knows its output is lost. Each
slot is stamped with the session (`token`) it was written for, so that a
row's next session never reads its last one's.

numpy only, no torch: the front ends import this.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from antiphon.common.stepper.shared_block import Section

# The columns of a slot's head: the step it holds, the session it holds it
# for, how many bytes, and a number the writer attaches (stage1: the frame's
# place in its session's stream).
STEP, TOKEN, SIZE, TAG = range(4)
# A slot's step while the stepper writes it, and before it ever has.
TORN, NEVER = -1, -2


def sections(depth: int, rows: int, slot_bytes: int) -> list[Section]:
    return [(np.int64, (depth, rows, 4)), (np.uint8, (depth, rows, slot_bytes))]


class SlotRing:
    def __init__(self, head: npt.NDArray[Any], data: npt.NDArray[Any]) -> None:
        self._head = head
        self._data = data
        self.depth = int(head.shape[0])
        self.slot_bytes = int(data.shape[2])

    def clear(self) -> None:
        """The creator, once: no slot holds a step yet."""
        self._head[:] = 0
        self._head[:, :, STEP] = NEVER

    def write(self, step: int, row: int, token: int, payload: Any, tag: int = 0) -> bool:
        """The stepper: `payload` (bytes-like) in row `row`'s slot for `step`;
        False (the slot says none) when it does not fit."""
        slot = step % self.depth
        head = self._head[slot, row]
        head[STEP] = TORN  # while written: a reader finds no step here
        data = np.frombuffer(payload, np.uint8)
        fits = len(data) <= self.slot_bytes
        if fits:
            self._data[slot, row, : len(data)] = data
        head[SIZE] = len(data) if fits else 0
        head[TOKEN] = token
        head[TAG] = tag
        head[STEP] = step
        return fits

    def read(self, step: int, row: int, token: int) -> tuple[bytes, int] | None:
        """A front end: what `step` wrote on `row` for session `token`, and its
        tag; (b"", 0) when it wrote nothing for it, None when it was lost
        (overwritten by a later step: this reader is `depth` steps behind)."""
        slot = step % self.depth
        head = self._head[slot, row]
        stamped = int(head[STEP])
        if stamped > step or stamped == TORN:
            return None  # a later step's, or one being written now
        if stamped < step or int(head[TOKEN]) != token:
            return b"", 0  # the row stepped for nobody, or for its last session
        size, tag = int(head[SIZE]), int(head[TAG])
        data = self._data[slot, row, :size].tobytes()
        if int(head[STEP]) != step:
            return None
        return data, tag
