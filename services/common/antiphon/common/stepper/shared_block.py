"""A block of shared memory between a stepper process and its front ends
(stage0's and stage1's `duplex_front_ends`), its sections as numpy views.

The stepper creates it, and Python's resource tracker unlinks it when the
stepper ends, even killed; front ends map the same file untracked, so that
one dying unlinks nothing. Each section has one writer per place; what the
other side reads of a count is older at worst, and 8-byte stores are whole on
the hosts we run (x86-64, arm64).

numpy only, no torch: the front ends import this.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Sequence
from multiprocessing import shared_memory
from typing import Any, Self

import numpy as np
import numpy.typing as npt

# A section: its element type and shape.
Section = tuple[type[np.generic], tuple[int, ...]]


def section_bytes(section: Section) -> int:
    dtype, shape = section
    return int(np.dtype(dtype).itemsize * np.prod(shape, dtype=np.int64))


class SharedBlock:
    def __init__(
        self,
        name: str,
        sections: Sequence[Section],
        mapped: mmap.mmap,
        owned: shared_memory.SharedMemory | None = None,
    ) -> None:
        self.name = name
        self._mapped = mapped
        # The owner's handle, kept to unlink the name: its own mapping is
        # closed at once, so that no view of it outlives it.
        self._owned = owned
        buffer = memoryview(mapped)
        self.views: list[npt.NDArray[Any]] = []
        at = 0
        for dtype, shape in sections:
            size = section_bytes((dtype, shape))
            count = size // np.dtype(dtype).itemsize
            self.views.append(np.frombuffer(buffer, dtype, count, at).reshape(shape))
            at += size

    @classmethod
    def create(cls, sections: Sequence[Section]) -> Self:
        """A new block, zeroed (the kernel's fresh pages are)."""
        size = max(1, sum(section_bytes(s) for s in sections))
        memory = shared_memory.SharedMemory(create=True, size=size)
        memory.close()
        return cls(memory.name, sections, _map(memory.name, size), memory)

    @classmethod
    def attach(cls, name: str, sections: Sequence[Section]) -> Self:
        size = max(1, sum(section_bytes(s) for s in sections))
        return cls(name, sections, _map(name, size))

    def close(self, *, unlink: bool = False) -> None:
        """Drop the views (the owner unlinks the name too). Views still held
        elsewhere keep the mapping until they go."""
        self.views.clear()
        if unlink and self._owned is not None:
            self._owned.unlink()
        with contextlib.suppress(BufferError):
            self._mapped.close()


def _map(name: str, size: int) -> mmap.mmap:
    fd = os.open(f"/dev/shm/{name}", os.O_RDWR)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
