"""A raw-WebSocket Realtime client in the duplex dialect (`?duplex=1`): send events,
collect what comes back. The benchmarks time frames as they arrive, so nothing sits
between the socket and them (the SDK-like `antiphon.client` does more per frame).
The tests' client (tests/support/realtime.py) is this one, taught OpenAI's dialect."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode

import websockets

Event = dict[str, Any]

# A session whose turns end only at an explicit commit (`turn_detection: null`).
MANUAL: dict[str, Any] = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}


def duplex_url(gateway_port: int, query: str = "") -> str:
    """`/v1/realtime` with the duplex extensions on, and any further `query` ("?a=b")."""
    params = dict(parse_qsl(query.lstrip("?")))
    params["duplex"] = "1"
    return f"ws://127.0.0.1:{gateway_port}/v1/realtime?{urlencode(params)}"


class RealtimeClient:
    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self.events: list[Event] = []

    @classmethod
    async def connect(cls, url: str) -> RealtimeClient:
        return cls(await websockets.connect(url, max_size=None))

    async def send(self, type_: str, **fields: Any) -> None:
        await self.ws.send(json.dumps({"type": type_, **fields}))

    async def open(self, **session: Any) -> Event:
        """The first `session.update` opens: `session.created` (or the `error` refusing
        it), once the `session.updated` that follows it has come too."""
        await self.send("session.update", session=session)
        created = await self.until(lambda e: e["type"] in ("session.created", "error"))
        if created["type"] != "session.created":
            return created
        answer = await self.until(lambda e: e["type"] in ("session.updated", "error"))
        return created if answer["type"] == "session.updated" else answer

    async def append(self, pcm16: bytes, chunk_bytes: int = 9600, **extra: Any) -> None:
        """Audio as `input_audio_buffer.append` events (9600 B = 200 ms at 24 kHz)."""
        for i in range(0, len(pcm16), chunk_bytes):
            audio = base64.b64encode(pcm16[i : i + chunk_bytes]).decode()
            await self.send("input_audio_buffer.append", audio=audio, **extra)

    async def recv(self, timeout: float = 60.0) -> Event:
        """The next event, kept in `events`."""
        event: Event = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.events.append(event)
        return event

    async def until(self, predicate: Callable[[Event], bool], timeout: float = 60.0) -> Event:
        """Receive until an event matches; every event received is kept in `events`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                event = await self.recv(max(0.01, deadline - loop.time()))
            except (TimeoutError, websockets.ConnectionClosed) as exc:
                # What came last says why what was awaited never came.
                exc.add_note(f"last events: {self.events[-5:]}")
                raise
            if predicate(event):
                return event

    async def response_cycle(self, timeout: float = 120.0) -> list[Event]:
        """Events from now through the `rate_limits.updated` that follows a `response.done`."""
        start = len(self.events)
        seen_done = False

        def end(e: Event) -> bool:
            nonlocal seen_done
            seen_done = seen_done or e["type"] == "response.done"
            return seen_done and e["type"] == "rate_limits.updated"

        await self.until(end, timeout)
        return self.events[start:]

    async def close(self) -> None:
        """`session.close` (its admission slot is free at once), then the socket."""
        try:
            await self.send("session.close")
            await self.until(lambda e: e["type"] == "session.closed", timeout=10)
        except Exception:
            pass  # already closed or never opened
        await self.ws.close()


def of_type(events: list[Event], *types: str) -> list[Event]:
    return [e for e in events if e["type"] in types]


def audio_bytes(events: list[Event]) -> bytes:
    return b"".join(
        base64.b64decode(e["delta"]) for e in of_type(events, "response.output_audio.delta")
    )
