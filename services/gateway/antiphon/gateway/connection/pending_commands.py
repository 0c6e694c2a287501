"""A socket's commands waiting for its session stream, bounded, each leaving
only once a stream took it.

A stream may be lost while its sender holds a command: that command stays
first, for the next stream, so none is dropped between streams and their
order is the order the socket read them.
"""

from __future__ import annotations

import asyncio
from collections import deque

from antiphon.v1 import session_pb2 as spb


class PendingCommands:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._commands: deque[spb.ClientCommand] = deque()
        self._added = asyncio.Event()
        self._taken = asyncio.Event()

    def empty(self) -> bool:
        return not self._commands

    async def put(self, command: spb.ClientCommand) -> None:
        """Add `command` last; waits while `limit` wait (TCP then slows the client)."""
        while len(self._commands) >= self._limit:
            self._taken.clear()
            await self._taken.wait()
        self.put_nowait(command)

    def put_nowait(self, command: spb.ClientCommand) -> None:
        self._commands.append(command)
        self._added.set()

    async def first(self) -> spb.ClientCommand:
        """The oldest command, left in place until `took` says a stream has it."""
        while not self._commands:
            self._added.clear()
            await self._added.wait()
        return self._commands[0]

    def took(self) -> None:
        self._commands.popleft()
        self._taken.set()
