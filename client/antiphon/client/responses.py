"""One assistant response as it arrives: its audio, its words, its end.

The client demultiplexes the event stream by response id into
`ResponseHandle`s (`ResponseRouter`); a consumer reads the audio as it comes
(`chunks`) or waits for the whole (`wait`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from antiphon.client.events import (
    AudioDelta,
    Decision,
    Event,
    FunctionCall,
    ResponseCreated,
    ResponseDone,
    TextDelta,
    TranscriptDelta,
)
from antiphon.client.feed import Fanout, Feed


class ResponseHandle:
    def __init__(self, response_id: str) -> None:
        self.response_id = response_id
        self.events: list[Event] = []
        self.transcript = ""
        self.text = ""
        self.calls: list[FunctionCall] = []
        # "speak" unless the duplex dialect said the model keeps listening.
        self.decision = "speak"
        self._audio: list[bytes] = []
        self._chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._done: asyncio.Future[ResponseDone | None] = asyncio.get_running_loop().create_future()

    @property
    def audio(self) -> bytes:
        """The audio received so far, PCM16 at the session's output rate."""
        return b"".join(self._audio)

    @property
    def finished(self) -> bool:
        return self._done.done()

    @property
    def done_event(self) -> ResponseDone | None:
        return self._done.result() if self._done.done() else None

    @property
    def status(self) -> str:
        """`completed`, `cancelled`, `incomplete`, `failed`; "" while it runs
        (or when the connection was lost for good before it ended)."""
        done = self.done_event
        return done.status if done is not None else ""

    def feed(self, event: Event) -> None:
        self.events.append(event)
        if isinstance(event, AudioDelta):
            self._audio.append(event.audio)
            self._chunks.put_nowait(event.audio)
        elif isinstance(event, TranscriptDelta):
            self.transcript += event.text
        elif isinstance(event, TextDelta):
            self.text += event.text
        elif isinstance(event, FunctionCall):
            self.calls.append(event)
        elif isinstance(event, Decision):
            self.decision = event.decision
        elif isinstance(event, ResponseDone):
            self._end(event)

    def abandon(self) -> None:
        """The session ended under it: it will hear nothing more."""
        self._end(None)

    def _end(self, done: ResponseDone | None) -> None:
        if not self._done.done():
            self._done.set_result(done)
            self._chunks.put_nowait(None)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Each audio delta's PCM16 as it arrives, until the response ends."""
        while (chunk := await self._chunks.get()) is not None:
            yield chunk

    async def wait(self, timeout: float | None = None) -> ResponseDone | None:
        """The `response.done` (None if the session ended first)."""
        return await asyncio.wait_for(asyncio.shield(self._done), timeout)


class ResponseRouter:
    """Hands each response's events to its handle (a new one on
    `response.created`) and each new handle to the open `feed`s."""

    def __init__(self) -> None:
        self._running: dict[str, ResponseHandle] = {}
        self._created: Fanout[ResponseHandle] = Fanout()
        # The response being said; "" when none is.
        self.active_response_id = ""

    def route(self, event: Event) -> None:
        rid = event.response_id
        if isinstance(event, ResponseCreated):
            created = ResponseHandle(rid)
            self._running[rid] = created
            self.active_response_id = rid
            self._created.publish(created)
        handle = self._running.get(rid) if rid else None
        if handle is None:
            return
        handle.feed(event)
        if handle.finished:
            del self._running[rid]
            if self.active_response_id == rid:
                self.active_response_id = ""

    def feed(self) -> Feed[ResponseHandle]:
        """Each response created from now on, as it is created."""
        return self._created.feed()

    def end(self) -> None:
        """The session is over: no response comes, and those running never end."""
        self._created.end()
        for handle in self._running.values():
            handle.abandon()
        self._running.clear()
