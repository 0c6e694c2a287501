"""The Starlette application: routes, and one lifespan that owns the gRPC channel."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from antiphon.common import loop_lag
from antiphon.common.grpcserver import channel, check_ready
from antiphon.common.metrics import service_registry
from antiphon.gateway.connection.client_socket import ClientSocket, WebSocketClient
from antiphon.gateway.connection.connection import Connection
from antiphon.gateway.dialects.dialect import NATIVE, Dialect, live_dialect, realtime_dialect
from antiphon.gateway.drain import Drain
from antiphon.gateway.edge.edge import Admitted, Edge
from antiphon.gateway.live.sideband import Sidebands
from antiphon.gateway.live.tap import TappedSocket
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.gateway.settings import GatewaySettings

if TYPE_CHECKING:
    from antiphon.gateway.calls.calls import Calls
    from antiphon.gateway.live.calls import LiveCalls

SESSION_SERVICE = "antiphon.v1.SessionService"
Talk = Callable[[ClientSocket, Admitted], Awaitable[None]]
STATIC = Path(__file__).parent / "static"


def create_app(settings: GatewaySettings) -> Starlette:
    registry = service_registry()
    metrics = GatewayMetrics(registry)
    # Origins, API keys, client secrets and per-key limits, checked before any accept.
    edge = Edge(settings, metrics)
    # Started by SIGTERM (`main.DrainingServer`), before uvicorn's own shutdown.
    drain = Drain(metrics)
    # The GPT-Live sessions this gateway's connections hold, for sidebands.
    sidebands = Sidebands(edge)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        channels = [
            channel(a) for a in (settings.session_address, *settings.session_fallback_addresses)
        ]
        app.state.channels = channels
        try:
            async with loop_lag.watching(metrics.loop_lag):
                yield
        finally:
            if calls is not None:
                await calls.close()
            for ch in channels:
                await ch.close()

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if drain.draining:
            # Leaving: the load balancer must send new clients elsewhere.
            return JSONResponse({"status": "draining"}, status_code=503)
        # The session service is ready only while Redis and a worker of each
        # stage are reachable, so this one check covers the whole path.
        channels = request.app.state.channels
        ready = any([await check_ready(ch, SESSION_SERVICE) for ch in channels])
        return JSONResponse(
            {"status": "ready" if ready else "not_ready"}, status_code=200 if ready else 503
        )

    async def metrics_endpoint(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def converse(client: ClientSocket, dialect: Dialect, admitted: Admitted) -> None:
        """One client's session over whatever carries its events (a WebSocket,
        a WebRTC call); its lease on the key's sessions ends with it."""
        metrics.connections_active.inc()
        try:
            conn = Connection(
                client,
                app.state.channels,
                metrics,
                max_message_bytes=settings.max_message_bytes,
                reconnect_timeout_s=settings.reconnect_timeout_s,
                max_append_bytes=settings.max_append_bytes,
                first_event_timeout_s=settings.first_event_timeout_s,
                max_outbox_bytes=settings.max_outbox_bytes,
                max_pending_commands=settings.max_pending_commands,
                dialect=dialect,
                pinned=admitted.principal.pinned,
            )
            with drain.track(conn):
                await conn.run()
        finally:
            metrics.connections_active.dec()
            admitted.lease.release()

    async def converse_live(client: ClientSocket, admitted: Admitted) -> None:
        """A GPT-Live session (a WebSocket's or a WebRTC call's), which
        sidebands may attach to from its `session.started` until it ends."""
        tap = sidebands.tap(admitted.principal.key_id)
        try:
            await converse(TappedSocket(client, tap), live_dialect(tap), admitted)
        finally:
            sidebands.drop(tap)

    def conversing(dialect: Dialect) -> Talk:
        return lambda client, admitted: converse(client, dialect, admitted)

    async def serve(ws: WebSocket, talk: Talk) -> None:
        if drain.draining:
            # A draining gateway opens no session: 503, as its /readyz says.
            metrics.server_closes.labels("draining").inc()
            await ws.send_denial_response(JSONResponse({"status": "draining"}, status_code=503))
            return
        admitted = await edge.admit_socket(ws)
        if admitted is None:
            return
        try:
            offered = ws.scope.get("subprotocols") or []
            await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        except BaseException:
            admitted.lease.release()
            raise
        await talk(WebSocketClient(ws), admitted)

    calls: Calls | None = None
    live_calls: LiveCalls | None = None
    if settings.webrtc_calls:
        # aiortc (and PyAV's codecs) load with the WebRTC edge only.
        from antiphon.gateway.calls.calls import Calls
        from antiphon.gateway.live.calls import LiveCalls

        # WebRTC calls speak OpenAI's dialect, as OpenAI's own do; `?duplex=1` on
        # the offer's URL gives the duplex extensions (a new call resumes a session).
        calls = Calls(
            edge,
            metrics,
            lambda client, admitted: converse(
                client, realtime_dialect(client.query_params), admitted
            ),
            draining=lambda: drain.draining,
            max_calls=settings.max_calls,
            media_timeout_s=settings.call_media_timeout_s,
            ice_servers=settings.webrtc_ice_servers,
        )
        # GPT-Live's calls (`POST /v1/live/sessions`) are calls of the same gateway.
        live_calls = LiveCalls(
            calls,
            edge,
            metrics,
            converse_live,
            draining=lambda: drain.draining,
            media_timeout_s=settings.call_media_timeout_s,
        )

    async def realtime(ws: WebSocket) -> None:
        if "call_id" in ws.query_params and calls is not None:
            # A server's socket on a WebRTC call (calls.py).
            await calls.attach(ws)
            return
        # OpenAI's own protocol; the reference's duplex extensions with `?duplex=1`.
        await serve(ws, conversing(realtime_dialect(ws.query_params)))

    async def duplex(ws: WebSocket) -> None:
        # The native dialect: same sessions, the runner's own event names.
        await serve(ws, conversing(NATIVE))

    async def live(ws: WebSocket) -> None:
        # OpenAI's GPT-Live: the model decides when to speak, on a timeline
        # clocked by the client's audio (antiphon.gateway.live).
        await serve(ws, converse_live)

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics_endpoint),
            WebSocketRoute("/v1/realtime", realtime),
            WebSocketRoute("/v1/duplex", duplex),
            WebSocketRoute("/v1/live/sessions", live),
            # A sideband must reach this replica: the session is held here (sideband.py).
            WebSocketRoute("/v1/live/sessions/{id}/attach", sidebands.attach),
            *edge.routes(),
            *(calls.routes() if calls is not None else []),
            *(live_calls.routes() if live_calls is not None else []),
        ],
        lifespan=lifespan,
    )
    app.state.drain = drain
    return app
