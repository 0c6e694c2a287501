"""A minimal raw-WebSocket Realtime client for tests: send events, collect events.

It speaks either dialect of `/v1/realtime`: OpenAI's (no opt-in, `realtime_url`)
or the duplex extensions (`?duplex=1`, `duplex_url`; `/v1/duplex` too). On
OpenAI's dialect every frame it receives is judged by the `openai` SDK's
models in strict mode (`openai_models.violations`) and a frame they refuse
fails the test at once, so all live traffic of that dialect is checked.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import websockets

from bench.lib import realtime
from bench.lib.realtime import MANUAL, Event, audio_bytes, duplex_url, of_type
from tests.support import openai_models

__all__ = [
    "MANUAL",
    "Event",
    "OpenAIViolation",
    "RealtimeClient",
    "audio_bytes",
    "duplex_url",
    "of_type",
    "realtime_url",
]


def realtime_url(gateway_port: int, query: str = "") -> str:
    """OpenAI's dialect (unless `query` opts in to the duplex extensions)."""
    return f"ws://127.0.0.1:{gateway_port}/v1/realtime{query}"


def is_duplex(url: str) -> bool:
    """Whether `url` speaks a dialect with the duplex extensions."""
    parts = urlsplit(url)
    flag = dict(parse_qsl(parts.query)).get("duplex", "")
    return parts.path.endswith("/v1/duplex") or flag.lower() in ("1", "true", "yes")


class OpenAIViolation(AssertionError):
    """A frame of OpenAI's dialect that a strict `openai` SDK client refuses."""


class RealtimeClient(realtime.RealtimeClient):
    """The benchmarks' raw client (bench/lib/realtime.py), in either dialect."""

    def __init__(self, ws: websockets.ClientConnection, *, duplex: bool = True) -> None:
        super().__init__(ws)
        self.duplex = duplex
        self._probes = 0  # `barrier` probes sent
        # OpenAI's PCM rate; a `Microphone` on a session opened at another names its rate.
        self.input_rate = 24000

    @classmethod
    async def connect(cls, url: str) -> RealtimeClient:
        return cls(await websockets.connect(url, max_size=None), duplex=is_duplex(url))

    async def open(self, **session: Any) -> Event:
        """Open a session configured with `session`; returns `session.created`
        (or the `error` refusing it), having consumed the `session.updated`.

        Duplex: the first `session.update` opens. OpenAI's dialect opened on
        connect, with the server's defaults: `session.created` comes first,
        then the update, as a stock client does it."""
        if self.duplex:
            return await super().open(**session)
        created = await self.until(lambda e: e["type"] in ("session.created", "error"))
        if created["type"] != "session.created":
            return created
        await self.send("session.update", session=session)
        answer = await self.until(lambda e: e["type"] in ("session.updated", "error"))
        return created if answer["type"] == "session.updated" else answer

    async def append_audio(self, pcm16: bytes) -> None:
        """One append (what a `Microphone` sends every 200 ms)."""
        await self.send("input_audio_buffer.append", audio=base64.b64encode(pcm16).decode())

    async def recv(self, timeout: float = 60.0) -> Event:
        """The next event; on OpenAI's dialect one the strict SDK refuses fails the test."""
        event = await super().recv(timeout)
        if not self.duplex:
            problems = openai_models.violations(event)
            if problems:
                raise OpenAIViolation(f"{event['type']}: {problems}")
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

    async def close(self) -> None:
        """Close the session (freeing its admission slot at once), then the socket.

        Duplex: `session.close`, answered by `session.closed`. OpenAI's dialect
        has no such event: the clean close of the socket (1000) ends it."""
        if self.duplex:
            await super().close()
        else:
            await self.ws.close()


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
