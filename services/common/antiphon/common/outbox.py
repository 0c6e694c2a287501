"""The results one stage binding has yet to write: in order, bounded, and merged while they wait.

The binding's writer takes one result at a time, as fast as its gRPC stream
accepts them; what the session produces meanwhile waits here. A `merge` hook
may fold a new result into the last waiting one (stage0: text deltas of one
response), so a writer that keeps up sends every result the moment it comes,
and one that lags sends fewer, longer ones instead of a backlog: nothing
waits for a batch to fill. Past `limit` waiting results the outbox closes
(the binding then ends the stream after them): a reader that far behind
starts over rather than the worker queueing without end.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

Ev = TypeVar("Ev")

# merge(last, new): what replaces the waiting `last` to say both (it may be
# `last` itself, changed: a waiting result is the outbox's), or None when
# `new` must go after it as a result of its own.
Merge = Callable[[Ev, Ev], Ev | None]


class Outbox(Generic[Ev]):
    def __init__(self, limit: int, merge: Merge[Ev] | None = None) -> None:
        self._limit = limit
        self._merge = merge
        self._waiting: deque[Ev] = deque()
        self._ready = asyncio.Event()
        self.closed = False
        # Closed by a result past the limit, not by its producer.
        self.overflowed = False

    def __len__(self) -> int:
        return len(self._waiting)

    def put(self, result: Ev) -> None:
        """Queue `result`, or fold it into the last waiting one; dropped once closed.
        A merge adds nothing that waits, so it is taken even at the limit."""
        if self.closed:
            return
        if self._waiting and self._merge is not None:
            merged = self._merge(self._waiting[-1], result)
            if merged is not None:
                self._waiting[-1] = merged
                return
        if len(self._waiting) >= self._limit:
            self.overflowed = True
            self.close()
            return
        self._waiting.append(result)
        self._ready.set()

    def close(self) -> None:
        """No more results: the reader gets those waiting, then None."""
        self.closed = True
        self._ready.set()

    async def get(self) -> Ev | None:
        """The next result, once there is one; None once closed and empty."""
        while not self._waiting:
            if self.closed:
                return None
            self._ready.clear()
            await self._ready.wait()
        return self._waiting.popleft()
