"""A `moshi` front end's engines (`duplex_front_ends`): its sessions served on
rows of a stepper in another process (stepper.py), as Stage0Engines.

The front end is a whole stage0 worker (main.serve: gRPC server, health,
registry entry, metrics) whose `Bind` streams hand their audio to shared
memory (shared_rows.py) and their other requests to the stepper's pipe,
and whose sessions get each step's frames from their rows' slots when the
stepper's notice for the step comes. It holds bytes and builds protobufs:
no torch, no model.

When the stepper is gone (its pipe ends, or it says its model failed),
every session is told (`engine_failed`, as a failed step tells them in one
process) and the front end stops at once: its streams end UNAVAILABLE and
the session service binds them elsewhere.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable

from antiphon.common.outbox import Merge
from antiphon.common.stepper.pipe import Link, StepperPipe
from antiphon.stage0.backends.moshi.crossing import (
    Events,
    Release,
    Request,
    Stepped,
)
from antiphon.stage0.backends.moshi.shared_rows import AudioRing, Layout, SharedRows, StepSlots
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)


class StepperLink(Link[Layout]):
    """A front end's link to its stepper (common/stepper/pipe.Link), and its
    worker's engines on it."""

    async def load(
        self,
        settings: object,
        metrics: Stage0Metrics,
        client: object,
        on_failure: Callable[[], None],
    ) -> FrontEndEngines:
        """main.serve's loader: ready once the stepper's model is (its `Ready`)."""
        engines = FrontEndEngines(self, metrics, on_failure)
        await engines.ready.wait()
        return engines


class FrontEndEngines:
    # Each frame's events go as they are: none fold together.
    merge: Merge[pb.Stage0Event] | None = None

    def __init__(
        self, link: StepperLink, metrics: Stage0Metrics, on_failure: Callable[[], None]
    ) -> None:
        self._shared = SharedRows.attach(link.layout)
        self._slots = StepSlots(self._shared)
        self._rings = {row: AudioRing(self._shared, row) for row in link.rows}
        # A stack: a new session takes the row freed last (the rows in use stay few and low).
        self._free = list(reversed(link.rows))
        self._metrics = metrics
        self._by_row: dict[int, FrontEndSession] = {}
        self._by_token: dict[int, FrontEndSession] = {}
        # Tokens unlike a predecessor's (a front end restarted on the same rows).
        self._tokens = itertools.count(os.getpid() << 24)
        self._pipe = StepperPipe(link.conn, self._take, self._tell, on_failure)
        self.ready = self._pipe.ready

    def bind(self, emit: Callable[[pb.Stage0Event], None]) -> FrontEndSession:
        # Admission (ActiveSessions, this front end's capacity: its rows) keeps a row free.
        row = self._free.pop()
        session = FrontEndSession(self, self._rings[row], row, next(self._tokens), emit)
        self._by_row[row], self._by_token[session.token] = session, session
        if self._pipe.lost is not None:
            session.tell_lost(self._pipe.lost)
        return session

    def send(self, message: Request | Release) -> None:
        self._pipe.send(message)

    def leave(self, session: FrontEndSession) -> None:
        self.send(Release(session.token))
        del self._by_row[session.row], self._by_token[session.token]
        self._free.append(session.row)

    async def close(self) -> None:
        self._pipe.close()
        self._shared.close()

    # ------------------------------------------------------- from the stepper
    def _take(self, message: Stepped | Events) -> None:
        if isinstance(message, Stepped):
            self._stepped(message.step)
        elif isinstance(message, Events):
            if (session := self._by_token.get(message.token)) is not None:
                session.deliver(message.events)

    def _stepped(self, step: int) -> None:
        for row, session in self._by_row.items():
            events = self._slots.read(step, row, session.token)
            if events is None:
                self._metrics.duplex_lost_frames.inc()
            elif events:
                session.deliver(events)

    def _tell(self, reason: str) -> None:
        for session in self._by_row.values():
            session.tell_lost(reason)


class FrontEndSession:
    """One Bind stream's session: audio into its row's ring, the rest to the stepper."""

    def __init__(
        self,
        engines: FrontEndEngines,
        ring: AudioRing,
        row: int,
        token: int,
        emit: Callable[[pb.Stage0Event], None],
    ) -> None:
        self._engines = engines
        self._ring = ring
        self.row = row
        self.token = token
        self._emit = emit
        # Audio before the open goes to the stepper, which says it came too soon.
        self._opened = False
        ring.restart()

    def handle(self, req: pb.Stage0Request) -> None:
        kind = req.WhichOneof("kind")
        if kind == "audio" and self._opened:
            self._ring.push(req.audio.pcm16, req.audio.epoch)
            return
        self._opened = self._opened or kind == "open"
        self._engines.send(
            Request(self.token, self.row, self._ring.written, req.SerializeToString())
        )

    def deliver(self, events: list[bytes]) -> None:
        for event in events:
            self._emit(pb.Stage0Event.FromString(event))

    def tell_lost(self, reason: str) -> None:
        error = pb.StageError(code="engine_failed", message=reason)
        self._emit(pb.Stage0Event(error=error))

    async def close(self) -> None:
        self._engines.leave(self)
