"""The gateway's SIGTERM drain: not ready, no new sockets, every client told to go.

uvicorn's own shutdown closes every WebSocket at once with 1012, before the
application hears a word, so a session behind a socket is cut mid-event.
The drain runs first instead (`main.DrainingServer`): /readyz answers 503
so the load balancer stops sending clients here, a new socket is refused,
and each open connection detaches its session (the session keeps it
resumable for its grace period, holding no stage slot) and then closes
with 1012 (service restart). A duplex client resumes through another
gateway; an OpenAI client opens again. Only then does uvicorn stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Protocol

from antiphon.gateway.metrics import GatewayMetrics

log = logging.getLogger(__name__)


class Leaves(Protocol):
    def drain(self) -> None: ...


class Drain:
    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics
        self.draining = False
        self._open: set[Leaves] = set()
        self._empty = asyncio.Event()
        self._empty.set()

    @contextlib.contextmanager
    def track(self, conn: Leaves) -> Iterator[None]:
        """`conn` is open for the duration; told to leave if a drain starts."""
        self._open.add(conn)
        self._empty.clear()
        if self.draining:
            conn.drain()
        try:
            yield
        finally:
            self._open.discard(conn)
            if not self._open:
                self._empty.set()

    async def run(self, budget_s: float) -> None:
        """Tell every connection to leave; wait at most `budget_s` for them."""
        self.draining = True
        self._metrics.draining.set(1)
        log.info("draining", extra={"connections": len(self._open), "budget_s": budget_s})
        for conn in list(self._open):
            conn.drain()
        try:
            await asyncio.wait_for(self._empty.wait(), budget_s)
        except TimeoutError:
            log.warning("drain budget spent", extra={"connections": len(self._open)})
        log.info("drained")
