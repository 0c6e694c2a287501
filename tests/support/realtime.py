"""A minimal raw-WebSocket Realtime client for tests: send events, collect events.

It speaks either dialect of `/v1/realtime`: OpenAI's (no opt-in, `realtime_url`)
or the duplex extensions (`?duplex=1`, `duplex_url`; `/v1/duplex` too). On
OpenAI's dialect every frame it receives is judged by the `openai` SDK's
models in strict mode (`openai_models.violations`) and a frame they refuse
fails the test at once, so all live traffic of that dialect is checked.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import websockets

from tests.support import openai_models

Event = dict[str, Any]

# A session whose turns end only at an explicit commit (`turn_detection: null`).
MANUAL: dict[str, Any] = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}


def realtime_url(gateway_port: int, query: str = "") -> str:
    """OpenAI's dialect (unless `query` opts in to the duplex extensions)."""
    return f"ws://127.0.0.1:{gateway_port}/v1/realtime{query}"


def duplex_url(gateway_port: int, query: str = "") -> str:
    """The duplex dialect (`?duplex=1`, with any further `query`): the reference's contract."""
    return realtime_url(gateway_port, with_duplex(query))


def with_duplex(query: str) -> str:
    """`query` (e.g. "?autostart=0") with `duplex=1` in it."""
    params = dict(parse_qsl(query.lstrip("?")))
    params["duplex"] = "1"
    return "?" + urlencode(params)


def is_duplex(url: str) -> bool:
    """Whether `url` speaks a dialect with the duplex extensions."""
    parts = urlsplit(url)
    flag = dict(parse_qsl(parts.query)).get("duplex", "")
    return parts.path.endswith("/v1/duplex") or flag.lower() in ("1", "true", "yes")


class OpenAIViolation(AssertionError):
    """A frame of OpenAI's dialect that a strict `openai` SDK client refuses."""


class RealtimeClient:
    def __init__(self, ws: websockets.ClientConnection, *, duplex: bool = True) -> None:
        self.ws = ws
        self.duplex = duplex
        self.events: list[Event] = []
        self._probes = 0  # `barrier` probes sent
        # OpenAI's PCM rate; a `Microphone` on a session opened at another names its rate.
        self.input_rate = 24000

    @classmethod
    async def connect(cls, url: str) -> RealtimeClient:
        return cls(await websockets.connect(url, max_size=None), duplex=is_duplex(url))

    async def send(self, type_: str, **fields: Any) -> None:
        await self.ws.send(json.dumps({"type": type_, **fields}))

    async def open(self, **session: Any) -> Event:
        """Open a session configured with `session`; returns `session.created`
        (or the `error` refusing it), having consumed the `session.updated`.

        Duplex: the first `session.update` opens. OpenAI's dialect opened on
        connect, with the server's defaults: `session.created` comes first,
        then the update, as a stock client does it."""
        if self.duplex:
            await self.send("session.update", session=session)
        created = await self.until(lambda e: e["type"] in ("session.created", "error"))
        if created["type"] != "session.created":
            return created
        if not self.duplex:
            await self.send("session.update", session=session)
        answer = await self.until(lambda e: e["type"] in ("session.updated", "error"))
        return created if answer["type"] == "session.updated" else answer

    async def append_audio(self, pcm16: bytes) -> None:
        """One append (what a `Microphone` sends every 200 ms)."""
        await self.send("input_audio_buffer.append", audio=base64.b64encode(pcm16).decode())

    async def append(self, pcm16: bytes, chunk_bytes: int = 9600, **extra: Any) -> None:
        """Stream audio as `input_audio_buffer.append` events (9600 B = 200 ms at 24 kHz)."""
        for i in range(0, len(pcm16), chunk_bytes):
            audio = base64.b64encode(pcm16[i : i + chunk_bytes]).decode()
            await self.send("input_audio_buffer.append", audio=audio, **extra)

    async def recv(self, timeout: float = 60.0) -> Event:
        event: Event = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        self.events.append(event)
        if not self.duplex:
            problems = openai_models.violations(event)
            if problems:
                raise OpenAIViolation(f"{event['type']}: {problems}")
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

    async def barrier(self) -> list[Event]:
        """What the server sent from now until it answered a probe sent now.

        The session answers events in order, so anything its earlier events
        caused comes before the probe's answer: when the test waits for that
        answer, "nothing else came" needs no time window. Duplex: a
        `session.heartbeat`, answered by `session.heartbeat_ack`. OpenAI's
        dialect has no heartbeat; `conversation.item.retrieve` of an id no
        item has is answered by an `error` naming the probe's event id."""
        self._probes += 1
        probe = f"evt_barrier_{self._probes}"
        start = len(self.events)
        if self.duplex:
            await self.send("session.heartbeat", event_id=probe)
            await self.until(lambda e: e["type"] == "session.heartbeat_ack")
        else:
            await self.send("conversation.item.retrieve", item_id="item_barrier", event_id=probe)
            await self.until(lambda e: e["type"] == "error" and e["error"]["event_id"] == probe)
        return self.events[start:-1]

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
        """Close the session (freeing its admission slot at once), then the socket.

        Duplex: `session.close`, answered by `session.closed`. OpenAI's dialect
        has no such event: the clean close of the socket (1000) ends it."""
        if self.duplex:
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


async def ask(client: RealtimeClient, pcm16: bytes, **response: Any) -> list[Event]:
    """One manual turn: the audio, a commit, `response.create` (with `response` options)."""
    await client.append(pcm16)
    await client.send("input_audio_buffer.commit")
    await client.send("response.create", **({"response": response} if response else {}))
    return await client.response_cycle()


async def one_turn(gateway_port: int, pcm16: bytes) -> list[Event]:
    """A whole session with one turn (`turn_detection: null`): its events."""
    client = await RealtimeClient.connect(realtime_url(gateway_port))
    try:
        await client.open(**MANUAL)
        await ask(client, pcm16)
    finally:
        await client.close()
    return client.events
