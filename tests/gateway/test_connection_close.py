"""How a connection closes is decided by the move into `Closing`: a real
gateway (uvicorn on loopback) and real WebSocket clients, its session
replica a loopback address where nothing answers (a real gRPC channel)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
import websockets
from websockets.exceptions import ConnectionClosed

from antiphon.gateway.app import create_app
from antiphon.gateway.drain import Drain
from antiphon.gateway.settings import GatewaySettings
from tests.support.polling import eventually

FIRST_EVENT_S = 0.3
RECONNECT_S = 0.3


def _nothing_listens() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[str, Drain]]:
    settings = GatewaySettings(
        session_address=f"127.0.0.1:{_nothing_listens()}",
        reconnect_timeout_s=RECONNECT_S,
        first_event_timeout_s=FIRST_EVENT_S,
        webrtc_calls=False,
    )
    app = create_app(settings)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))

    async def started() -> bool:
        await asyncio.sleep(0.01)
        return server.started

    await eventually(started, 10.0)
    try:
        yield f"ws://127.0.0.1:{port}", app.state.drain
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
        sock.close()


async def _until_closed(ws: websockets.ClientConnection) -> list[dict[str, Any]]:
    """Every event the socket got before it closed."""
    got: list[dict[str, Any]] = []
    with pytest.raises(ConnectionClosed):
        while True:
            got.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
    return got


async def test_no_replica_in_time_is_told_and_closes_with_1011(
    gateway: tuple[str, Drain],
) -> None:
    url, _drain = gateway
    async with websockets.connect(f"{url}/v1/realtime") as ws:
        await ws.send(json.dumps({"type": "input_audio_buffer.clear"}))  # not a silent client
        got = await _until_closed(ws)
        assert [(e["type"], e["error"]["code"]) for e in got] == [("error", "session_unavailable")]
        assert ws.close_code == 1011
        assert ws.close_reason == ""


async def test_a_silent_client_gets_its_error_and_the_leavings_code_and_reason(
    gateway: tuple[str, Drain],
) -> None:
    url, _drain = gateway
    async with websockets.connect(f"{url}/v1/realtime?duplex=1") as ws:
        got = await _until_closed(ws)
        assert [e["error"]["code"] for e in got] == ["first_event_timeout"]
        assert (ws.close_code, ws.close_reason) == (1008, "first_event_timeout")


async def test_a_drain_closes_a_socket_not_yet_open_with_1012(
    gateway: tuple[str, Drain],
) -> None:
    url, drain = gateway
    async with websockets.connect(f"{url}/v1/realtime?duplex=1") as ws:
        await asyncio.sleep(0.05)
        draining = asyncio.create_task(drain.run(5.0))
        assert await _until_closed(ws) == []
        assert (ws.close_code, ws.close_reason) == (1012, "service_restart")
        await draining


async def test_a_gpt_live_socket_refuses_events_before_its_start_then_opens_on_it(
    gateway: tuple[str, Drain],
) -> None:
    """`/v1/live/sessions` opens on `session.start` only; the session it finds
    no replica for ends as lost, in GPT-Live's own shapes."""
    url, _drain = gateway
    async with websockets.connect(f"{url}/v1/live/sessions") as ws:
        early = {"type": "session.input_audio.append", "audio": "", "event_id": "e1"}
        await ws.send(json.dumps(early))
        refused = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert (refused["error"]["code"], refused["client_event_id"]) == (
            "session_not_started",
            "e1",
        )
        start = {"type": "session.start", "session": {"model": "gpt-live-1"}}
        await ws.send(json.dumps(start))
        got = await _until_closed(ws)
        assert [(e["type"], e["error"]["code"]) for e in got] == [("error", "session_unavailable")]
        assert ws.close_code == 1011
