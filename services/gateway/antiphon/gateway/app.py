"""The Starlette application: routes, and one lifespan that owns the gRPC channel."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from antiphon.common.grpcserver import channel, check_ready
from antiphon.common.metrics import service_registry
from antiphon.gateway.connection import Connection
from antiphon.gateway.dialect import NATIVE, Dialect, realtime_dialect
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.gateway.settings import GatewaySettings

SESSION_SERVICE = "antiphon.v1.SessionService"
STATIC = Path(__file__).parent / "static"
CLOSE_POLICY = 1008


def create_app(settings: GatewaySettings) -> Starlette:
    registry = service_registry()
    metrics = GatewayMetrics(registry)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        channels = [
            channel(a) for a in (settings.session_address, *settings.session_fallback_addresses)
        ]
        app.state.channels = channels
        try:
            yield
        finally:
            for ch in channels:
                await ch.close()

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
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

    async def serve(ws: WebSocket, dialect: Dialect) -> None:
        if settings.api_key and not _authorized(ws, settings.api_key):
            await ws.close(CLOSE_POLICY)
            return
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        metrics.connections_active.inc()
        try:
            conn = Connection(
                ws,
                ws.app.state.channels,
                metrics,
                max_message_bytes=settings.max_message_bytes,
                reconnect_timeout_s=settings.reconnect_timeout_s,
                dialect=dialect,
            )
            await conn.run()
        finally:
            metrics.connections_active.dec()

    async def realtime(ws: WebSocket) -> None:
        # OpenAI's own protocol; the reference's duplex extensions with `?duplex=1`.
        await serve(ws, realtime_dialect(ws.query_params))

    async def duplex(ws: WebSocket) -> None:
        # The native dialect: same sessions, the runner's own event names.
        await serve(ws, NATIVE)

    return Starlette(
        routes=[
            Route("/", index),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics_endpoint),
            WebSocketRoute("/v1/realtime", realtime),
            WebSocketRoute("/v1/duplex", duplex),
        ],
        lifespan=lifespan,
    )


def _authorized(ws: WebSocket, key: str) -> bool:
    header = ws.headers.get("authorization", "")
    if header == f"Bearer {key}":
        return True
    # Browsers cannot set headers on a WebSocket; OpenAI's convention is a
    # subprotocol carrying the key.
    return f"openai-insecure-api-key.{key}" in (ws.scope.get("subprotocols") or [])
