"""What the client hands out to many readers: `Fanout` puts each item on the
queue of every open `Feed` (an async iterator), and None once it is over.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Feed(Generic[T]):
    """An async iterator over what a client hands out, subscribed when made
    (so nothing between the call and the first `anext` is missed); `aclose`
    or leaving `async with` unsubscribes."""

    def __init__(self, queue: asyncio.Queue[T | None], unsubscribe: Callable[[], None]) -> None:
        self._queue = queue
        self._unsubscribe = unsubscribe

    def __aiter__(self) -> Feed[T]:
        return self

    async def __anext__(self) -> T:
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)  # over for every later call too
            await self.aclose()
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        self._unsubscribe()

    async def __aenter__(self) -> Feed[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class Fanout(Generic[T]):
    """Each item `publish`ed goes to every subscriber's queue, in order; once
    `end`ed, each queue (a later one too) gets None."""

    def __init__(self) -> None:
        self._queues: list[asyncio.Queue[T | None]] = []
        self._over = False

    def subscribe(self) -> asyncio.Queue[T | None]:
        queue: asyncio.Queue[T | None] = asyncio.Queue()
        if self._over:
            queue.put_nowait(None)
        self._queues.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[T | None]) -> None:
        with contextlib.suppress(ValueError):
            self._queues.remove(queue)

    def feed(self) -> Feed[T]:
        """A feed of what is published from now on."""
        queue = self.subscribe()
        return Feed(queue, lambda: self.unsubscribe(queue))

    def publish(self, item: T) -> None:
        for queue in self._queues:
            queue.put_nowait(item)

    def end(self) -> None:
        self._over = True
        for queue in self._queues:
            queue.put_nowait(None)
