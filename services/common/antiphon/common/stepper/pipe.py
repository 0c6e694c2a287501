"""A front end's end of its stepper's pipe (`duplex_front_ends`, either
stage), read on the front end's loop.

Each message but the two both stages share goes to the stage's `take`:
`Ready` sets `ready`, and `Failed`, like the pipe's end, means the stepper
is gone. Then, once: the sessions are told (`tell`, as a failed step tells
them in one process), nothing more is sent, and a moment later the worker
stops at once (`on_failure`: its streams end UNAVAILABLE and the session
service binds them elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

from antiphon.common.stepper.messages import Failed, Ready

log = logging.getLogger(__name__)

LayoutT = TypeVar("LayoutT")


@dataclass(frozen=True)
class Link(Generic[LayoutT]):
    """What a front end's process is given to reach its stepper: the pipe, the
    shared memory's layout (the stage's), and the rows that are its own. Each
    stage's link adds how its worker is built on it."""

    conn: Connection
    layout: LayoutT
    rows: range


# After telling its sessions the stepper is gone, the moment their streams get
# to send it before the front end stops.
FLUSH_S = 0.2


class StepperPipe:
    def __init__(
        self,
        conn: Connection,
        take: Callable[[Any], None],
        tell: Callable[[str], None],
        on_failure: Callable[[], None],
    ) -> None:
        self._conn = conn
        self._take = take
        self._tell = tell
        self._on_failure = on_failure
        self.ready = asyncio.Event()
        # Why the stepper is gone, once it is.
        self.lost: str | None = None
        asyncio.get_running_loop().add_reader(conn.fileno(), self._readable)

    def send(self, message: object) -> None:
        if self.lost is None:
            self._conn.send(message)

    def close(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self._conn.fileno())
        self._conn.close()

    def _readable(self) -> None:
        try:
            while self._conn.poll():
                message = self._conn.recv()
                if isinstance(message, Ready):
                    self.ready.set()
                elif isinstance(message, Failed):
                    self._lose(message.message)
                else:
                    self._take(message)
        except (EOFError, OSError):
            self._lose("the duplex stepper is gone")

    def _lose(self, reason: str) -> None:
        if self.lost is not None:
            return
        self.lost = reason
        log.error("duplex stepper lost; the front end stops", extra={"reason": reason})
        asyncio.get_running_loop().remove_reader(self._conn.fileno())
        self._tell(reason)
        asyncio.get_running_loop().call_later(FLUSH_S, self._on_failure)
