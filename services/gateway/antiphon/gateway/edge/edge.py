"""The gateway's edge: admitting WebSocket upgrades, and the secret-minting routes.

`admit_socket` runs before the socket is accepted: a refusal is the HTTP
answer to the upgrade (401, 403, 429 with OpenAI's error JSON) through
the ASGI WebSocket denial extension, which uvicorn's websockets and wsproto
servers offer. Under a server without it the socket is accepted, told with
one `error` event, and closed with 1008: either way no session exists yet.

`POST /v1/realtime/client_secrets` is OpenAI's; `GET /demo/session` exists
only when `demo_api_key` is set, and gives whoever loads the demo page a
short-lived secret of that key (what the page uses to connect).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.websockets import WebSocket

from antiphon.common.ids import new_id
from antiphon.gateway.connection.close_codes import CLOSE_POLICY
from antiphon.gateway.edge import client_secrets
from antiphon.gateway.edge.client_secrets import ClientSecretError, SecretSigner, signing_key
from antiphon.gateway.edge.credentials import KeyRing
from antiphon.gateway.edge.gate import Gate, Principal, Refusal
from antiphon.gateway.edge.key_limits import KeyLimits, Lease
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.gateway.settings import GatewaySettings

log = logging.getLogger(__name__)

DENIAL = "websocket.http.response"
# A client_secrets body is a session config: instructions and tools, not audio.
MAX_REQUEST_BYTES = 256 * 1024
NO_STORE = {"cache-control": "no-store"}


@dataclass
class Admitted:
    principal: Principal
    lease: Lease


class Edge:
    def __init__(self, settings: GatewaySettings, metrics: GatewayMetrics) -> None:
        keys = KeyRing.load(settings.api_key, settings.api_keys_file, settings.demo_api_key)
        limits = KeyLimits(
            settings.key_max_sessions, settings.key_opens_per_s, settings.key_opens_burst
        )
        signer = SecretSigner(signing_key(settings.client_secret_signing_key))
        self.gate = Gate(keys, signer, limits, settings.allowed_origins)
        self._metrics = metrics
        self._demo_key_id = keys.match(settings.demo_api_key) if settings.demo_api_key else None
        self._demo_ttl_s = settings.demo_secret_ttl_s
        if not settings.client_secret_signing_key:
            log.info("client secrets are signed with a per-process key (no signing key set)")
        log.info(
            "edge configured",
            extra={
                "api_keys": len(keys),
                "allowed_origins": len(settings.allowed_origins),
                "demo_session": self._demo_key_id is not None,
            },
        )

    def routes(self) -> list[BaseRoute]:
        routes: list[BaseRoute] = [
            Route("/v1/realtime/client_secrets", self.client_secrets, methods=["POST"])
        ]
        if self._demo_key_id is not None:
            routes.append(Route("/demo/session", self.demo_session, methods=["GET"]))
        return routes

    def refused(self, refusal: Refusal, path: str, key_id: str = "") -> None:
        self._metrics.refusals.labels(refusal.reason).inc()
        log.info(
            "refused",
            extra={
                "reason": refusal.reason,
                "status": refusal.status,
                "path": path,
                "key_id": key_id,
            },
        )

    async def admit_socket(self, ws: WebSocket) -> Admitted | None:
        """The socket's principal and its lease on one session of its key, or
        None once the upgrade was refused (and answered)."""
        principal: Principal | None = None
        try:
            self.gate.check_origin(ws.headers)
            principal = self.gate.authenticate(
                ws.headers, ws.scope.get("subprotocols") or [], secrets_allowed=True
            )
            lease = self.gate.admit(principal)
        except Refusal as refusal:
            self.refused(refusal, ws.url.path, principal.key_id if principal else "")
            await deny(ws, refusal)
            return None
        return Admitted(principal, lease)

    def admit_request(self, request: Request) -> Admitted | Response:
        """An HTTP request's principal and its lease on one session of its key
        (a WebRTC call), or the refusal's answer."""
        principal = self.principal_of(request)
        if isinstance(principal, Response):
            return principal
        try:
            return Admitted(principal, self.gate.admit(principal))
        except Refusal as refusal:
            self.refused(refusal, request.url.path, principal.key_id)
            return JSONResponse(refusal.body(), refusal.status)

    def principal_of(self, request: Request) -> Principal | Response:
        """Who an HTTP request comes from (an API key or a client secret), or
        the refusal's answer."""
        try:
            self.gate.check_origin(request.headers)
            return self.gate.authenticate(request.headers, secrets_allowed=True)
        except Refusal as refusal:
            self.refused(refusal, request.url.path)
            return JSONResponse(refusal.body(), refusal.status)

    async def client_secrets(self, request: Request) -> Response:
        """OpenAI's `POST /v1/realtime/client_secrets`, authorized by an API key."""
        try:
            self.gate.check_origin(request.headers)
            principal = self.gate.authenticate(request.headers, secrets_allowed=False)
            req = client_secrets.parse_request(await _json_body(request))
            value, expires_at = self.gate.signer.mint(principal.key_id, req.ttl_s, req.session)
        except Refusal as refusal:
            self.refused(refusal, request.url.path)
            return JSONResponse(refusal.body(), refusal.status)
        except ClientSecretError as err:
            bad = Refusal(
                400, "invalid_request_error", err.code, err.message, "invalid_request", err.param
            )
            self.refused(bad, request.url.path)
            return JSONResponse(bad.body(), 400)
        self._metrics.client_secrets_minted.labels("client_secrets").inc()
        log.info(
            "client secret minted",
            extra={"key_id": principal.key_id, "expires_at": expires_at},
        )
        body = client_secrets.response(value, expires_at, req.session)
        return JSONResponse(body, headers=NO_STORE)

    async def demo_session(self, request: Request) -> Response:
        """A secret of the demo key for the demo page: no session config, so
        the page configures its own session."""
        assert self._demo_key_id is not None
        try:
            self.gate.check_origin(request.headers)
        except Refusal as refusal:
            self.refused(refusal, request.url.path)
            return JSONResponse(refusal.body(), refusal.status)
        value, expires_at = self.gate.signer.mint(self._demo_key_id, self._demo_ttl_s, {})
        self._metrics.client_secrets_minted.labels("demo").inc()
        body = client_secrets.response(value, expires_at, {})
        return JSONResponse(body, headers=NO_STORE)


async def bounded_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None once it grew past `limit` bytes (the rest
    is never read: a client cannot make the gateway hold more)."""
    size = 0
    chunks: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _json_body(request: Request) -> Any:
    raw = await bounded_body(request, MAX_REQUEST_BYTES)
    if raw is None:
        raise ClientSecretError(
            "request_too_large", f"the request body is limited to {MAX_REQUEST_BYTES} bytes"
        )
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ClientSecretError("invalid_json", "the request body is not valid JSON") from exc


async def deny(ws: WebSocket, refusal: Refusal) -> None:
    """Refuse a WebSocket upgrade with `refusal`'s status and error JSON."""
    if DENIAL in ws.scope.get("extensions", {}):
        await ws.send_denial_response(JSONResponse(refusal.body(), refusal.status))
        return
    offered = ws.scope.get("subprotocols") or []
    await ws.accept(subprotocol="realtime" if "realtime" in offered else None)
    error = {**refusal.body()["error"], "event_id": None}
    await ws.send_text(json.dumps({"type": "error", "event_id": new_id("event"), "error": error}))
    await ws.close(CLOSE_POLICY)
