"""GPT-Live over WebRTC: `POST /v1/live/sessions` (SDK: `client.live.create`).

The body is JSON, `{"session": <session.start's session>, "transport":
{"type": "webrtc", "sdp": <offer>}}`; the answer is `200 {"session": {"id"},
"transport": {"type": "webrtc", "sdp": <answer>}}` once the session has
started, so the id is the session's and a sideband may attach to it at once
(sideband.py). The session's events ride the `oai-events` data channel in
GPT-Live's shapes, `session.started` first (there is no `session.start` on
the channel: the POST was it); the microphone is the input audio and the
answer's track is the output track (call_socket.py). The call is one of the
gateway's calls (calls/calls.py): counted against `max_calls`, ended when
its media stops for `call_media_timeout_s`, by `.../hangup` with its `rtc_`
id never (GPT-Live ends a session with `session.close`), and when the
gateway stops.

Everything that can be judged before a call exists is, with OpenAI's REST
error (`{"error": {type, code, message, param}}`): the credential as the
WebSocket's (401), then the body (400: not JSON, a key neither object
defines, no `sdp`, a session `session.start` would refuse), then the key's
limits (429). `audio.format` is checked and then set to the call's own
(PCM16 at 24 kHz, what the sideband's reflected audio is in): on a call the
wire's format is Opus, never the client's to choose.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from antiphon.gateway.calls.calls import Calls
from antiphon.gateway.connection.client_socket import ClientSocket
from antiphon.gateway.edge.edge import Admitted, Edge, bounded_body
from antiphon.gateway.edge.gate import Refusal
from antiphon.gateway.errors import ClientError, not_unicode
from antiphon.gateway.live.call_socket import CALL_FORMAT, LiveCallSocket
from antiphon.gateway.live.start_config import start_config
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.gateway.translate import fields

Json = dict[str, Any]
Talk = Callable[[ClientSocket, Admitted], Awaitable[None]]

# A session config is instructions; an offer a few KB.
MAX_BODY_BYTES = 256 * 1024
# How long the POST waits for the session to start (admission, stage binding).
START_TIMEOUT_S = 30.0


def call_request(raw: bytes) -> tuple[Json, str]:
    """The session config (for `session.start`) and the offer; raises ClientError."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ClientError("invalid_json", "the request body is not valid JSON") from exc
    body = fields.obj(body, "body")
    fields.known_keys(body, frozenset({"session", "transport"}))
    transport = fields.obj(fields.required(body, "transport"), "transport")
    fields.known_keys(transport, frozenset({"type", "sdp"}), "transport.")
    kind = fields.required(transport, "type", "transport.type")
    if kind != "webrtc":
        raise ClientError(
            "invalid_value",
            f"Invalid value: {kind!r}. Supported values are: 'webrtc'.",
            param="transport.type",
        )
    sdp = fields.string(fields.required(transport, "sdp", "transport.sdp"), "transport.sdp")
    if not sdp.startswith("v=0"):
        raise ClientError(
            "invalid_offer", "transport.sdp is not an SDP offer", param="transport.sdp"
        )
    session = dict(fields.obj(fields.required(body, "session"), "session"))
    if session.get("client"):
        # start_config's refusal speaks of a WebSocket; on a call it is this.
        raise ClientError(
            "unsupported_capability",
            "`session.client` (the data channel's event permissions) is not served yet: "
            "the data channel gets and may send every event",
            param="session.client",
        )
    try:
        start_config({"session": session})  # what session.start would refuse, refused now
    except UnicodeEncodeError as exc:
        raise not_unicode() from exc
    audio = dict(session.get("audio") or {})
    audio["format"] = CALL_FORMAT
    session["audio"] = audio
    return session, sdp


class LiveCalls:
    """`POST /v1/live/sessions`: a GPT-Live session on a WebRTC call."""

    def __init__(
        self,
        calls: Calls,
        edge: Edge,
        metrics: GatewayMetrics,
        talk: Talk,
        *,
        draining: Callable[[], bool],
        media_timeout_s: float,
    ) -> None:
        self._calls = calls
        self._edge = edge
        self._metrics = metrics
        self._talk = talk
        self._draining = draining
        self._media_timeout_s = media_timeout_s

    def routes(self) -> list[BaseRoute]:
        return [
            Route(
                "/v1/live/sessions",
                self._calls.cross_origin(self.create),
                methods=["POST", "OPTIONS"],
            )
        ]

    async def create(self, request: Request) -> Response:
        if self._draining():
            self._metrics.server_closes.labels("draining").inc()
            return JSONResponse({"status": "draining"}, status_code=503)
        principal = self._edge.principal_of(request)
        if isinstance(principal, Response):
            return principal
        full = self._calls.refuse_if_full(request)
        if full is not None:
            return full
        raw = await bounded_body(request, MAX_BODY_BYTES)
        try:
            if raw is None:
                raise ClientError(
                    "request_too_large", f"the request body is limited to {MAX_BODY_BYTES} bytes"
                )
            session, offer = call_request(raw)
        except ClientError as err:
            return self._refused(request, err, 400, principal.key_id)
        admitted = self._edge.admit_request(request)
        if isinstance(admitted, Response):
            return admitted
        socket = LiveCallSocket(self._media_timeout_s)
        socket.start(session)
        try:
            _call_id, answer = await self._calls.place(
                offer, socket, admitted, self._talk(socket, admitted)
            )
        except Exception as exc:
            admitted.lease.release()
            bad = ClientError(
                "invalid_offer", f"the offer could not be answered: {exc}", param="transport.sdp"
            )
            return self._refused(request, bad, 400, principal.key_id)
        await asyncio.wait({socket.started}, timeout=START_TIMEOUT_S)
        if not socket.started.done():
            socket.end("start_timeout")
        if (error := socket.started.exception()) is not None:
            socket.end("start_refused")
            assert isinstance(error, ClientError)  # what call_socket sets
            status = 400 if error.type == "invalid_request_error" else 503
            return self._refused(request, error, status, principal.key_id)
        body = {
            "session": {"id": socket.started.result()},
            "transport": {"type": "webrtc", "sdp": answer},
        }
        return JSONResponse(body)

    def _refused(self, request: Request, err: ClientError, status: int, key_id: str) -> Response:
        refusal = Refusal(status, err.type, err.code, err.message, "invalid_request", err.param)
        self._edge.refused(refusal, request.url.path, key_id)
        return JSONResponse(refusal.body(), status)
