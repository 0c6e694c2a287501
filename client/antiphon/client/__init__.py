"""Antiphon's Python client: a duplex Realtime session, its events, its timings.

    async with DuplexClient("ws://127.0.0.1:8000/v1/realtime?duplex=1") as client:
        await client.say("What is the capital of France?")
        await client.create_response()
        answer = await client.next_response()

See docs/client.md.
"""

from antiphon.client.collector import EventCollector, Timings
from antiphon.client.connect import DEFAULT_URL, Reconnect
from antiphon.client.duplex import DuplexClient
from antiphon.client.errors import (
    ClientError,
    ProtocolError,
    Refused,
    ServerUnreachable,
    SessionClosed,
)
from antiphon.client.events import Event
from antiphon.client.microphone import Microphone
from antiphon.client.responses import ResponseHandle

__all__ = [
    "DEFAULT_URL",
    "ClientError",
    "DuplexClient",
    "Event",
    "EventCollector",
    "Microphone",
    "ProtocolError",
    "Reconnect",
    "Refused",
    "ResponseHandle",
    "ServerUnreachable",
    "SessionClosed",
    "Timings",
]
