"""One session of the run, its turns driven by the load client and resumed on the
other gateway when its socket dies."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from antiphon.client import Event, Reconnect
from antiphon.client.events import Resumed
from antiphon.client.load import MANUAL, LoadClient, LoadSession, Question, SessionError
from bench.faults.cluster import FaultCluster
from bench.faults.ledger import Ledger

# A lost connection is resumed inside the client, for up to about a minute.
RECONNECT = Reconnect(attempts=80, first_delay_s=0.1, max_delay_s=1.0)


class FaultClient:
    """One session of the run: turns of the load client (`antiphon.client.load`),
    resumed inside the client on the other gateway when its socket dies.

    The client resumes at its `url`; that is always the other gateway's, so a
    client of a dead gateway resumes through the live one, as a client behind
    a load balancer would."""

    def __init__(self, index: int, cluster: FaultCluster, question: Question) -> None:
        self.index = index
        self.gateway = 1 + index % 2
        self.cluster = cluster
        self.question = question
        self.ledger = Ledger()
        self.client = LoadClient(
            cluster.url(self.gateway),
            session=MANUAL,
            reconnect=RECONNECT,
            heartbeat_s=0,
            open_timeout_s=10,
            on_frame=self.ledger.frame,
        )
        self.session = LoadSession(index, self.client)
        self.client.add_listener(self._on_event)
        self.turns: Counter[str] = Counter()
        self.failed = ""  # why the session could not go on, if it could not

    def _on_event(self, event: Event) -> None:
        if isinstance(event, Resumed):
            self.ledger.resumes += 1
            self.gateway = 3 - self.gateway
            self.client.url = self.cluster.url(3 - self.gateway)

    async def open(self) -> None:
        await self.session.start()
        self.client.url = self.cluster.url(3 - self.gateway)

    async def run(self, stop: asyncio.Event, pause_s: float) -> None:
        turn = 0
        while not stop.is_set():
            try:
                r = await self.session.turn(turn, self.question, time.monotonic(), 30, grace_s=0)
                self.turns[r.status] += 1
            except SessionError as exc:
                # The client could not resume it (refused, or out of attempts).
                self.failed = exc.code
                return
            turn += 1
            await asyncio.sleep(pause_s)

    async def finish(self) -> None:
        """Everything the session sent is in (a heartbeat is answered in order), then close."""
        if not self.failed:
            try:
                if await self.session.heartbeat(30) is None:
                    self.ledger.errors["final_heartbeat_lost"] += 1
            except SessionError:
                self.ledger.errors["final_heartbeat_lost"] += 1
        await self.session.close()
