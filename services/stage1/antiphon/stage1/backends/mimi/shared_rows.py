"""The memory a `mimi` stepper and its front ends share (`duplex_front_ends`):
per row, a ring of the frames' codes on their way in, and a slot per step
for the audio decoded from them on its way back.

Why shared memory: every session sends a frame and gets 80 ms of audio back
every 80 ms; as a message each over a pipe the stepper would pay per
session-frame what one process's event loop pays (docs/performance.md).
Here a front end writes codes where the step reads them, the step writes
each row's samples where the front end reads them, and one small notice per
step tells each front end (common/stepper/slot_ring.py).

Every place has one writer: a row's codes and write count, the front end
that serves the row (rows are split between front ends once, at start); a
row's read count, the slots, and the model's shape, the stepper.

numpy only, no torch: the front ends import this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from antiphon.common.moshi_checkpoint import FRAME_MS, SAMPLE_RATE
from antiphon.common.stepper import slot_ring
from antiphon.common.stepper.shared_block import Section, SharedBlock
from antiphon.common.stepper.slot_ring import SlotRing
from antiphon.stage1.frames.session import MAX_QUEUED_FRAMES

# The columns of a row's head.
WRITE, READ = range(2)
# The model's shape, written by the stepper once loaded (before `Ready`).
CODEBOOKS, CARDINALITY = range(2)
# Codebooks a ring's frame has room for: Mimi's most.
MAX_CODEBOOKS = 32
# A row's ring: a session never has more frames waiting than this.
RING_FRAMES = MAX_QUEUED_FRAMES
# Steps of output kept: 8 frames (640 ms) a front end may lag; float32
# samples, 7.5 KiB a row and step (15 MiB at 256 rows).
DEPTH = 8
SAMPLES = SAMPLE_RATE * FRAME_MS // 1000
SLOT_BYTES = SAMPLES * 4


@dataclass(frozen=True)
class Layout:
    """Where everything is, for `rows` rows: what a front end needs to attach
    (it is pickled to it)."""

    name: str
    rows: int

    def sections(self) -> list[Section]:
        return [
            (np.int64, (2,)),
            (np.int64, (self.rows, 2)),
            (np.int64, (self.rows, RING_FRAMES, MAX_CODEBOOKS)),
            *slot_ring.sections(DEPTH, self.rows, SLOT_BYTES),
        ]


class SharedRows:
    def __init__(self, layout: Layout, block: SharedBlock) -> None:
        self.layout = layout
        self._block = block
        self.model, self.head, self.codes, out_head, out = block.views
        self.slots = SlotRing(out_head, out)

    @classmethod
    def create(cls, rows: int) -> Self:
        block = SharedBlock.create(Layout("", rows).sections())
        shared = cls(Layout(block.name, rows), block)
        shared.slots.clear()
        return shared

    @classmethod
    def attach(cls, layout: Layout) -> Self:
        return cls(layout, SharedBlock.attach(layout.name, layout.sections()))

    def close(self, *, unlink: bool = False) -> None:
        del self.model, self.head, self.codes, self.slots
        self._block.close(unlink=unlink)


class CodeRing:
    """One row's frames' codes, oldest first: the front end `push`es, the
    stepper reads the oldest and `pop`s it once decoded. The front end never
    has more than RING_FRAMES waiting (its session refuses more), so a write
    never overtakes the read."""

    def __init__(self, shared: SharedRows, row: int) -> None:
        self._head: npt.NDArray[Any] = shared.head[row]
        self._codes: npt.NDArray[Any] = shared.codes[row]

    # --------------------------------------------------- front end (writer)
    def push(self, codes: Sequence[int]) -> None:
        write = int(self._head[WRITE])
        self._codes[write % RING_FRAMES, : len(codes)] = codes
        self._head[WRITE] = write + 1

    @property
    def written(self) -> int:
        return int(self._head[WRITE])

    @property
    def waiting(self) -> int:
        """Frames written and not yet decoded."""
        return int(self._head[WRITE]) - int(self._head[READ])

    # --------------------------------------------------- stepper (reader)
    @property
    def read(self) -> int:
        return int(self._head[READ])

    def head(self, codebooks: int) -> npt.NDArray[Any] | None:
        read = int(self._head[READ])
        if int(self._head[WRITE]) <= read:
            return None
        return self._codes[read % RING_FRAMES, :codebooks]

    def pop(self) -> None:
        self._head[READ] = int(self._head[READ]) + 1

    def skip_to(self, mark: int) -> None:
        """A new session on the row: what its last one left is not decoded."""
        self._head[READ] = max(int(self._head[READ]), mark)
