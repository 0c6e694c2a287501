"""Limits a client cannot raise, and backpressure: real processes, the synthetic stages.

The gateway here has small limits (a 1 s first-event window, 32 000-byte
appends, a 64 KiB outbox) so a test reaches them quickly; the defaults are
OpenAI's (15 MiB per append, 60 minutes per session) and are checked
against the frame size below. A second stack's sessions last 2 s at most.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import urllib.request
from collections.abc import Iterator

import pytest
import websockets
from stack import LocalStack, Ports

from antiphon.gateway.settings import GatewaySettings
from tests.support.polling import eventually
from tests.support.realtime import Event, RealtimeClient, duplex_url, realtime_url
from tests.support.stacks import started

pytestmark = pytest.mark.stack

APPEND_LIMIT = 32_000
OUTBOX_LIMIT = 64 * 1024


def _stack(redis_url: str, db: int, **env: str) -> LocalStack:
    url = f"{redis_url.rsplit('/', 1)[0]}/{db}"
    return LocalStack(ports=Ports.free(), redis_url=url, extra_env=env)


@pytest.fixture(scope="module")
def limits_stack(request: pytest.FixtureRequest, redis_url: str) -> Iterator[LocalStack]:
    stack = _stack(
        redis_url,
        13,
        ANTIPHON_BACKEND="synthetic",
        ANTIPHON_CAPACITY="16",
        ANTIPHON_MAX_SESSIONS="8",
        ANTIPHON_DISCONNECT_GRACE_S="2",
        ANTIPHON_FIRST_EVENT_TIMEOUT_S="1",
        ANTIPHON_MAX_APPEND_BYTES=str(APPEND_LIMIT),
        ANTIPHON_MAX_OUTBOX_BYTES=str(OUTBOX_LIMIT),
    )
    with started(request, stack):
        yield stack


@pytest.fixture(scope="module")
def short_sessions_stack(request: pytest.FixtureRequest, redis_url: str) -> Iterator[LocalStack]:
    stack = _stack(
        redis_url,
        14,
        ANTIPHON_BACKEND="synthetic",
        ANTIPHON_CAPACITY="16",
        ANTIPHON_MAX_SESSION_DURATION_S="2",
    )
    with started(request, stack):
        yield stack


def metric(stack: LocalStack, name: str, labels: str = "") -> float:
    """One sample of the gateway's /metrics (0 when it has none yet)."""
    with urllib.request.urlopen(f"{stack.gateway_url}/metrics", timeout=5) as r:
        text = r.read().decode()
    pattern = rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} (\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def closed_with(client: RealtimeClient) -> tuple[list[Event], int, str]:
    """Everything until the gateway closes the socket, and how it closed it."""
    start = len(client.events)
    with pytest.raises(websockets.ConnectionClosed) as closed:
        while True:
            await client.recv()
    assert closed.value.rcvd is not None, "closed with no close frame"
    return client.events[start:], closed.value.rcvd.code, closed.value.rcvd.reason


def errors(events: list[Event]) -> list[str]:
    return [e["error"]["code"] for e in events if e["type"] == "error"]


def test_the_default_frame_size_carries_a_15_mib_append() -> None:
    """OpenAI's 15 MiB per append must fit one frame, in base64, with its envelope."""
    settings = GatewaySettings()
    assert settings.max_append_bytes == 15 * 1024 * 1024
    b64_len = 4 * -(-settings.max_append_bytes // 3)
    envelope = len(
        json.dumps({"type": "input_audio_buffer.append", "event_id": "e" * 64, "audio": ""})
    )
    assert b64_len + envelope <= settings.max_message_bytes


async def test_an_openai_socket_that_sends_nothing_is_closed_with_a_typed_error(
    limits_stack: LocalStack,
) -> None:
    """OpenAI's dialect opened the session on accept; silence after it is refused."""
    client = RealtimeClient(
        await websockets.connect(realtime_url(limits_stack.ports.gateway), max_size=None),
        duplex=False,
    )
    created = await client.until(lambda e: e["type"] == "session.created")
    assert created
    events, code, reason = await closed_with(client)
    assert errors(events) == ["first_event_timeout"]
    assert (code, reason) == (1008, "first_event_timeout")


async def test_a_duplex_socket_that_never_opens_is_closed_with_a_typed_error(
    limits_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(duplex_url(limits_stack.ports.gateway))
    events, code, reason = await closed_with(client)
    assert errors(events) == ["first_event_timeout"]
    assert (code, reason) == (1008, "first_event_timeout")


async def test_any_first_event_keeps_the_socket_not_only_session_update(
    limits_stack: LocalStack,
) -> None:
    """A stock OpenAI client may start with an append (the defaults suit it):
    it is not closed. A socket opened later and silent is closed: its window
    ended after this one's, so this one's has passed too (no timing)."""
    early = await RealtimeClient.connect(realtime_url(limits_stack.ports.gateway))
    try:
        await early.until(lambda e: e["type"] == "session.created")
        audio = base64.b64encode(bytes(3200)).decode()
        await early.send("input_audio_buffer.append", audio=audio)
        later = await RealtimeClient.connect(realtime_url(limits_stack.ports.gateway))
        events, code, _ = await closed_with(later)
        assert (errors(events), code) == (["first_event_timeout"], 1008)
        await early.send("input_audio_buffer.clear")
        await early.until(lambda e: e["type"] == "input_audio_buffer.cleared")
    finally:
        await early.close()


async def test_an_append_past_the_limit_is_refused_and_the_session_goes_on(
    limits_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(realtime_url(limits_stack.ports.gateway))
    try:
        await client.until(lambda e: e["type"] == "session.created")
        too_big = base64.b64encode(bytes(APPEND_LIMIT + 2)).decode()
        await client.send("input_audio_buffer.append", audio=too_big, event_id="evt_big")
        err = await client.until(lambda e: e["type"] == "error")
        assert (err["error"]["code"], err["error"]["event_id"]) == ("audio_too_large", "evt_big")
        # The largest allowed append is taken, and nothing else was refused.
        await client.append(bytes(APPEND_LIMIT), chunk_bytes=APPEND_LIMIT)
        assert errors(await client.barrier()) == []
    finally:
        await client.close()


async def test_a_client_that_stops_reading_is_closed_with_a_typed_error_and_bounded_memory(
    limits_stack: LocalStack,
) -> None:
    """The client asks for spoken answers and never reads them. The gateway
    keeps at most its outbox limit for it, then tells it `slow_consumer`
    (ahead of the backlog it dropped) and closes: the client finds that
    when it reads again."""
    before = metric(limits_stack, "antiphon_gateway_server_closes_total", 'reason="slow_consumer"')
    sock = socket.socket()
    # A small receive window, and a client that buffers one frame: what the
    # gateway sends stays with the gateway.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", limits_stack.ports.gateway))
    ws = await websockets.connect(
        realtime_url(limits_stack.ports.gateway), sock=sock, max_size=None, max_queue=1
    )
    client = RealtimeClient(ws, duplex=False)
    try:

        async def overflowed() -> bool:
            await ws.send(json.dumps({"type": "response.create"}))
            closes = metric(
                limits_stack, "antiphon_gateway_server_closes_total", 'reason="slow_consumer"'
            )
            return closes > before

        await eventually(overflowed, timeout_s=120)
        peak = metric(limits_stack, "antiphon_gateway_outbox_peak_bytes")
        assert 0 < peak <= OUTBOX_LIMIT
        events, code, reason = await closed_with(client)
        assert events[-1]["type"] == "error", events[-1]
        assert events[-1]["error"]["code"] == "slow_consumer"
        assert (code, reason) == (1008, "slow_consumer")

        async def nothing_waits() -> bool:
            return metric(limits_stack, "antiphon_gateway_outbox_bytes") == 0

        await eventually(nothing_waits)
    finally:
        await ws.close()


async def test_a_session_ends_at_its_maximum_duration_with_session_expired(
    short_sessions_stack: LocalStack,
) -> None:
    """The session service owns the clock: OpenAI's `session_expired` error,
    then the socket closes."""
    client = await RealtimeClient.connect(realtime_url(short_sessions_stack.ports.gateway))
    await client.until(lambda e: e["type"] == "session.created")
    await client.send("input_audio_buffer.clear")  # a live client, not an idle one
    err = await client.until(lambda e: e["type"] == "error", timeout=60)
    assert err["error"]["code"] == "session_expired"
    assert "maximum duration" in err["error"]["message"]
    with pytest.raises(websockets.ConnectionClosed):
        await client.recv()


async def test_the_duplex_dialect_names_the_maximum_duration(
    short_sessions_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(duplex_url(short_sessions_stack.ports.gateway))
    created = await client.open()
    assert created["type"] == "session.created"
    expired = await client.until(lambda e: e["type"] == "session.expired", timeout=60)
    assert expired["reason"] == "max_duration_expired"
