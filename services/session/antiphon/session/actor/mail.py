"""What arrives in a session actor's mailbox: one type per kind of news.

Client commands, stage results and timers share one mailbox, so the actor
handles them one at a time in arrival order; `match` on these types is its
whole dispatch.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

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
