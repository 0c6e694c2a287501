"""The client's WebSocket: the URL's dialect, connecting, and resuming a session.

A connection is one attempt; `Reconnect` says how a dropped one is retried,
and `ask_resume` is the `session.resume` handshake on a new one (duplex.py
decides when to run it and what to do with its answer).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import websockets
from websockets.asyncio.client import ClientConnection

from antiphon.client.errors import Refused, ServerUnreachable
from antiphon.client.events import ErrorEvent, Event, SessionEnded, parse

DEFAULT_URL = "ws://127.0.0.1:8000/v1/realtime?duplex=1"


@dataclass(frozen=True)
class Reconnect:
    """How a dropped connection is retried: `attempts` tries, with jittered
    exponential backoff from `first_delay_s` up to `max_delay_s`."""

    attempts: int = 6
    first_delay_s: float = 0.25
    max_delay_s: float = 4.0

    def delays(self) -> list[float]:
        return [
            min(self.max_delay_s, self.first_delay_s * 2**i) * random.uniform(0.5, 1.0)
            for i in range(self.attempts)
        ]


# Frozen: one value shared by every client that keeps the default.
DEFAULT_RECONNECT = Reconnect()


@dataclass(frozen=True)
class ResumePoint:
    """What `session.resume` names: the session, its incarnation and token, and
    the last journaled event the client holds (the server replays the rest)."""

    session_id: str
    incarnation: int
    resume_token: str
    last_seq: int


def is_duplex(url: str) -> bool:
    parts = urlsplit(url)
    flag = dict(parse_qsl(parts.query)).get("duplex", "")
    return flag.lower() in ("1", "true", "yes")


def with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | params
    return urlunsplit(parts._replace(query=urlencode(query)))


async def connect(url: str, *, api_key: str | None, open_timeout_s: float) -> ClientConnection:
    """A new connection to `url`. Raises `Refused` (an HTTP answer other than
    the upgrade) or `ServerUnreachable`."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        return await websockets.connect(
            url,
            additional_headers=headers,
            max_size=None,
            open_timeout=open_timeout_s,
            ping_interval=None,
            # No permessage-deflate (websockets offers it by default, uvicorn
            # accepts): the traffic is base64 PCM, which barely compresses, and
            # both ends would pay zlib on every frame. At 200 sessions in one
            # process it doubled the client's CPU and its commit -> first audio.
            compression=None,
        )
    except websockets.InvalidStatus as exc:
        status = exc.response.status_code
        body = exc.response.body.decode(errors="replace") if exc.response.body else ""
        raise Refused(f"HTTP {status} from {url}: {body}".strip(), status=status) from exc
    except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
        raise ServerUnreachable(url, exc) from exc


async def ask_resume(ws: ClientConnection, at: ResumePoint, timeout_s: float) -> Event | None:
    """`session.resumed`, an `error` (or the session's end) that is final, or
    None to try again later."""
    await ws.send(
        json.dumps(
            {
                "type": "session.resume",
                "session_id": at.session_id,
                "incarnation": at.incarnation,
                "resume_token": at.resume_token,
                "last_received_server_event_seq": at.last_seq,
            }
        )
    )
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                event = parse(json.loads(await ws.recv()), time.monotonic())
                if event.type == "session.resumed" or isinstance(event, SessionEnded):
                    return event
                if isinstance(event, ErrorEvent):
                    # No worker room is for now; anything else is final.
                    full = event.raw.get("error", {}).get("type") == "rate_limit_error"
                    return None if full else event
    except (TimeoutError, websockets.ConnectionClosed):
        return None
