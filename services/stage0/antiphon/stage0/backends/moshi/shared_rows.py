"""The memory a duplex stepper and its front ends share (`duplex_front_ends`):
per row, its input audio and its output of each step, at fixed places.

Why shared memory: hundreds of sessions each send 80 ms of audio and get a
frame back every 80 ms. As one pickled message each over a pipe, the stepper
would pay per session-frame what the single-process worker's event loop pays
(docs/performance.md); here a front end writes audio where the stepper reads
it at its next step, and the stepper writes each row's step output where
the front end reads it, told by one small notice per step.

Every place has one writer:

- a row's audio ring, its write count, the mark below which its audio was
  dropped, and the newest epoch its audio came with: the front end that
  serves the row (rows are split between front ends once, at start);
- a row's read count and each step's output slot: the stepper.

Counts only grow, a reader of the other side's count sees an older value at
worst, and 8-byte stores are whole on the hosts we run (x86-64, arm64).
Output slots form a ring of `depth` steps: a front end that falls that far
behind finds a slot stamped with a later step and knows its frames are lost.

numpy only, no torch: the front ends import this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

import numpy as np

from antiphon.common.stepper import slot_ring
from antiphon.common.stepper.shared_block import Section, SharedBlock
from antiphon.common.stepper.slot_ring import SlotRing
from antiphon.stage0.backends.moshi.rows import BYTES_PER_MS, FRAME_BYTES

# The columns of a row's input head.
WRITE, FLOOR, EPOCH, READ = range(4)
# Steps of output kept: 16 frames (1.28 s) a front end may lag.
DEPTH = 16
# A slot's bytes: a frame's event is some 40-60 bytes; a step's events past
# this go by the pipe instead (stepper.py).
SLOT_BYTES = 512
# Past a row's jitter limit, room the writer may run ahead of a reader
# copying its oldest frame without overwriting it: 0.5 s of audio.
RING_MARGIN_MS = 500
# A slot's events: each as its length (2 bytes, little-endian), then itself.
_LEN = 2


@dataclass(frozen=True)
class Layout:
    """Where everything is, for `rows` rows of `jitter_ms` audio each: what a
    front end needs to attach (it is pickled to it)."""

    name: str
    rows: int
    jitter_ms: int

    @property
    def limit(self) -> int:
        """Bytes a row keeps waiting at most (rows.JitterBuffer's limit)."""
        return max(FRAME_BYTES, self.jitter_ms * BYTES_PER_MS // FRAME_BYTES * FRAME_BYTES)

    @property
    def ring(self) -> int:
        return self.limit + RING_MARGIN_MS * BYTES_PER_MS

    def sections(self) -> list[Section]:
        return [
            (np.int64, (self.rows, 4)),
            (np.uint8, (self.rows, self.ring)),
            *slot_ring.sections(DEPTH, self.rows, SLOT_BYTES),
        ]


class SharedRows:
    """The shared block (common/stepper/shared_block.py) as this stage's views: each
    row's audio ring and head, and the step slots."""

    def __init__(self, layout: Layout, block: SharedBlock) -> None:
        self.layout = layout
        self._block = block
        self.head, self.ring, self.out_head, self.out = block.views

    @classmethod
    def create(cls, rows: int, jitter_ms: int) -> Self:
        probe = Layout("", rows, jitter_ms)
        block = SharedBlock.create(probe.sections())
        shared = cls(Layout(block.name, rows, jitter_ms), block)
        SlotRing(shared.out_head, shared.out).clear()
        return shared

    @classmethod
    def attach(cls, layout: Layout) -> Self:
        return cls(layout, SharedBlock.attach(layout.name, layout.sections()))

    def close(self, *, unlink: bool = False) -> None:
        """Drop the views (the owner unlinks the name too). Views still held
        elsewhere (a ring's) keep the mapping until they go."""
        del self.head, self.ring, self.out_head, self.out
        self._block.close(unlink=unlink)


class AudioRing:
    """One row's audio on its way to the stepper: rows.JitterBuffer's contract
    split across the two processes. The front end `push`es (and stamps the
    epoch); the stepper takes frames and clears up to a `mark` (the write
    count when the request that clears was sent, so audio sent after it stays)."""

    def __init__(self, shared: SharedRows, row: int) -> None:
        self._head = shared.head[row]
        self._ring = shared.ring[row]
        self._size = shared.layout.ring
        self._limit = shared.layout.limit
        # Stepper side: where the request being applied was sent, and where
        # the audio a commit reports starts.
        self.mark = int(self._head[WRITE])
        self.counted = self.mark
        self.dropped_ms = 0

    # --------------------------------------------------- front end (writer)
    def push(self, pcm16: bytes, epoch: int = 0) -> int:
        """Queue `pcm16`; the stepper drops what is past the limit when it
        reads (so it is not known here: 0)."""
        data = np.frombuffer(pcm16, np.uint8)[-self._limit :]
        write = int(self._head[WRITE]) + len(pcm16) - len(data)
        start = write % self._size
        first = min(len(data), self._size - start)
        self._ring[start : start + first] = data[:first]
        self._ring[: len(data) - first] = data[first:]
        write += len(data)
        # Keep at most `limit` waiting: what is older is dropped by the reader.
        floor = write - self._limit
        floor += floor % 2
        if floor > self._head[FLOOR]:
            self._head[FLOOR] = floor
        if epoch > self._head[EPOCH]:
            self._head[EPOCH] = epoch
        self._head[WRITE] = write
        return 0

    @property
    def written(self) -> int:
        return int(self._head[WRITE])

    def restart(self) -> None:
        """A new session on this row: its epochs start again."""
        self._head[EPOCH] = 0

    # --------------------------------------------------- stepper (reader)
    def _read(self) -> int:
        read = int(self._head[READ])
        floor = int(self._head[FLOOR])
        if floor > read:
            self.dropped_ms += (floor - read) // BYTES_PER_MS
            self._head[READ] = read = floor
        return read

    def take_frame(self) -> bytes | None:
        read = self._read()
        if int(self._head[WRITE]) - read < FRAME_BYTES:
            return None
        start = read % self._size
        first = min(FRAME_BYTES, self._size - start)
        frame: bytes = self._ring[start : start + first].tobytes()
        if first < FRAME_BYTES:
            frame += self._ring[: FRAME_BYTES - first].tobytes()
        self._head[READ] = read + FRAME_BYTES
        return frame

    def clear(self) -> None:
        """Drop what was sent before `mark`."""
        if self.mark > self._read():
            self._head[READ] = self.mark

    def take_uncommitted(self) -> int:
        """Bytes sent between the last request applied and `mark`."""
        count, self.counted = self.mark - self.counted, self.mark
        return count

    @property
    def epoch(self) -> int:
        return int(self._head[EPOCH])

    @property
    def buffered_ms(self) -> int:
        return (int(self._head[WRITE]) - self._read()) // BYTES_PER_MS


class StepSlots:
    """Each row's events of a step, in the slot ring (common/stepper/slot_ring.py)."""

    def __init__(self, shared: SharedRows) -> None:
        self._slots = SlotRing(shared.out_head, shared.out)

    def write(self, step: int, row: int, token: int, events: list[bytes]) -> bool:
        """The stepper: `events` in row `row`'s slot for `step`; False (the
        slot says none) when they do not fit: they go by the pipe."""
        payload = b"".join(len(e).to_bytes(_LEN, "little") + e for e in events)
        return self._slots.write(step, row, token, payload)

    def read(self, step: int, row: int, token: int) -> list[bytes] | None:
        """A front end: the events of `step` for session `token` on `row`;
        [] when it had none, None when they were lost (overwritten by a
        later step: this reader is `DEPTH` steps behind)."""
        slot = self._slots.read(step, row, token)
        if slot is None:
            return None
        data, _ = slot
        events = []
        at = 0
        while at < len(data):
            length = int.from_bytes(data[at : at + _LEN], "little")
            events.append(data[at + _LEN : at + _LEN + length])
            at += _LEN + length
        return events
