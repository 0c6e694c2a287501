"""What arrives in a session actor's mailbox: one type per kind of news.

Client commands, stage results and timers share one mailbox, so the actor
handles them one at a time in arrival order; `match` on these types is its
whole dispatch.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from antiphon.session.stage.stages import StageResult, StreamEnded
from antiphon.v1 import session_pb2 as spb


@dataclass(frozen=True)
class Open:
    """A new session's first stream; answered with (outbound, generation)."""

    on_connect: bool
    answer: asyncio.Future[Any]


@dataclass(frozen=True)
class Resume:
    """A stream that resumes the session; answered like `Open`, or refused."""

    request: spb.ResumeSession
    answer: asyncio.Future[Any]


@dataclass(frozen=True)
class Recover:
    """Taken over from another replica: bind the stages, end what it left open."""


@dataclass(frozen=True)
class Command:
    """A client command, from the stream of attachment `generation`."""

    generation: int
    command: spb.ClientCommand


@dataclass(frozen=True)
class StageNews:
    """A stage worker's result, or the end of its stream."""

    stage: str
    result: StageResult | StreamEnded


@dataclass(frozen=True)
class Detached:
    """The stream of `generation` ended with no word from the client."""

    generation: int


@dataclass(frozen=True)
class GraceExpired:
    generation: int


@dataclass(frozen=True)
class Tick:
    """The registry renewed the lease: time for periodic checks."""


@dataclass(frozen=True)
class OwnershipLost:
    """Another replica holds the lease now."""


@dataclass(frozen=True)
class Shutdown:
    """This replica drains: hand the session on."""


Mail = (
    Open
    | Resume
    | Recover
    | Command
    | StageNews
    | Detached
    | GraceExpired
    | Tick
    | OwnershipLost
    | Shutdown
)


class Mailbox:
    """A session actor's mailbox, bounded where its senders can wait.

    Client commands and stage results each have room for so many: a sender
    past it waits (`post_command`, `post_stage`), so its stream is not read
    and gRPC's flow control slows the other end: the gateway, then its
    client; the stage worker's bounded outbox, which merges or ends the
    stream as its policy says. The actor frees the room as it takes each
    item (`take`). Control mail (timers, attaches, a stream's end) is small
    and never waits.
    """

    def __init__(
        self, *, max_commands: int, max_stage_results: int, waited: Counter | None = None
    ) -> None:
        self._queue: asyncio.Queue[Mail] = asyncio.Queue()
        self._commands = asyncio.Semaphore(max_commands)
        # A delegated answer's LLM (assistant/delegate.py) is a stage of its own here.
        stages = ("stage0", "stage1", "delegate")
        self._stage = {stage: asyncio.Semaphore(max_stage_results) for stage in stages}
        # A counter labelled by stage: results that found no room at once.
        self._waited = waited

    def post(self, item: Mail) -> None:
        """Control mail: posted at once."""
        self._queue.put_nowait(item)

    async def post_command(self, item: Command) -> None:
        await self._commands.acquire()
        self._queue.put_nowait(item)

    async def post_stage(self, stage: str, result: StageResult | StreamEnded) -> None:
        """A stage's result, once there is room; the end of its stream at once
        (it is posted as the stream's reader stops, and must not wait)."""
        if isinstance(result, StageResult):
            room = self._stage[stage]
            if room.locked() and self._waited is not None:
                self._waited.labels(stage).inc()
            await room.acquire()
        self._queue.put_nowait(StageNews(stage, result))

    async def get(self) -> Mail:
        return self.take(await self._queue.get())

    def get_nowait(self) -> Mail | None:
        """The next item if one is waiting."""
        if self._queue.empty():
            return None
        return self.take(self._queue.get_nowait())

    def take(self, item: Mail) -> Mail:
        """`item` leaves the mailbox: its room is free for the next."""
        if isinstance(item, Command):
            self._commands.release()
        elif isinstance(item, StageNews) and isinstance(item.result, StageResult):
            self._stage[item.stage].release()
        return item

    def qsize(self) -> int:
        return self._queue.qsize()
