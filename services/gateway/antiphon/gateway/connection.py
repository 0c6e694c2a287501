"""One WebSocket connection: read, translate, forward; receive, project, write.

Exactly one task writes to the socket (the writer), so events keep the
order the session gave them. A refused client event is sent to the session
as `rejected`, which journals the error so it gets a `server_event_seq`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from opentelemetry import trace
from starlette.websockets import WebSocket, WebSocketDisconnect

from antiphon.common import tracing
from antiphon.gateway.errors import ClientError
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.gateway.projector import project
from antiphon.gateway.translator import Translator, metric_label
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import session_pb2_grpc

log = logging.getLogger(__name__)
tracer = trace.get_tracer("antiphon.gateway")

CLOSE_NORMAL = 1000
CLOSE_INTERNAL = 1011


class Connection:
    def __init__(
        self,
        ws: WebSocket,
        stub: session_pb2_grpc.SessionServiceStub,
        metrics: GatewayMetrics,
        max_message_bytes: int,
    ) -> None:
        self._ws = ws
        self._stub = stub
        self._metrics = metrics
        self._max_bytes = max_message_bytes
        self._translator = Translator()
        self._commands: asyncio.Queue[spb.ClientCommand | None] = asyncio.Queue()
        self._outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        try:
            first = await self._handshake()
            if first is not None:
                await self._serve(first)
        except WebSocketDisconnect:
            pass
        finally:
            self._commands.put_nowait(None)
            self._outbox.put_nowait(None)
            with contextlib.suppress(Exception):
                await writer

    # -------------------------------------------------------------- read
    async def _receive(self) -> dict[str, Any]:
        """The next client event as a dict; raises ClientError for a malformed frame."""
        message = await self._ws.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", CLOSE_NORMAL))
        text = message.get("text")
        if text is None:
            raise ClientError("invalid_event", "events must be JSON text frames")
        if len(text) > self._max_bytes:
            raise ClientError("message_too_large", f"events are limited to {self._max_bytes} bytes")
        try:
            event = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ClientError("invalid_json", f"event is not valid JSON: {exc.msg}") from exc
        if not isinstance(event, dict):
            raise ClientError("invalid_event", "an event must be a JSON object")
        return event

    async def _handshake(self) -> spb.ClientCommand | None:
        """Wait for the opening `session.update`; refuse anything else before it."""
        query = dict(self._ws.query_params)
        while True:
            event: dict[str, Any] | None = None
            try:
                event = await self._receive()
                self._metrics.events_in.labels(metric_label(event)).inc()
                return self._translator.open(event, query)
            except ClientError as err:
                self._metrics.client_errors.labels(err.code).inc()
                # No session yet, so nothing is journaled: seq 0 marks it.
                self._outbox.put_nowait(_local_error(err, event))

    async def _serve(self, first: spb.ClientCommand) -> None:
        self._commands.put_nowait(first)
        # The connection's span is the parent of the session's and stages' spans.
        with tracer.start_as_current_span("gateway.connection"):
            await self._relay(
                self._stub.Connect(self._command_stream(), metadata=tracing.inject_metadata())
            )

    async def _relay(self, call: Any) -> None:
        reader = asyncio.create_task(self._read_events(call))
        try:
            while not reader.done():
                receive = asyncio.create_task(self._receive())
                done, _ = await asyncio.wait({receive, reader}, return_when=asyncio.FIRST_COMPLETED)
                if receive not in done:
                    receive.cancel()
                    break
                self._forward(receive)
        finally:
            call.cancel()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    def _forward(self, receive: asyncio.Task[dict[str, Any]]) -> None:
        event: dict[str, Any] | None = None
        try:
            event = receive.result()
            self._metrics.events_in.labels(metric_label(event)).inc()
            self._commands.put_nowait(self._translator.translate(event))
        except ClientError as err:
            self._metrics.client_errors.labels(err.code).inc()
            rejected = spb.ErrorEvent(
                type=err.type,
                code=err.code,
                message=err.message,
                param=err.param,
                event_id=_event_id(event),
            )
            self._commands.put_nowait(spb.ClientCommand(rejected=rejected))

    async def _command_stream(self) -> AsyncIterator[spb.ClientCommand]:
        while (cmd := await self._commands.get()) is not None:
            yield cmd

    # ------------------------------------------------------------- write
    async def _read_events(self, call: Any) -> None:
        try:
            async for ev in call:
                kind = ev.WhichOneof("kind")
                self._outbox.put_nowait(project(ev))
                if kind == "session_closed" or (kind == "error" and ev.seq == 0):
                    break
            self._outbox.put_nowait(None)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED:
                return
            log.warning("session stream failed", extra={"code": str(exc.code())})
            self._outbox.put_nowait(
                {
                    "type": "error",
                    "server_event_seq": 0,
                    "error": {
                        "type": "server_error",
                        "code": "session_unavailable",
                        "message": "the session service is unavailable",
                        "param": None,
                        "event_id": None,
                    },
                }
            )
            self._outbox.put_nowait(None)

    async def _write(self) -> None:
        close_code = CLOSE_NORMAL
        try:
            while (event := await self._outbox.get()) is not None:
                self._metrics.events_out.labels(event["type"]).inc()
                await self._ws.send_text(json.dumps(event, separators=(",", ":")))
                if event["type"] == "error" and event["error"]["code"] == "session_unavailable":
                    close_code = CLOSE_INTERNAL
        except Exception:
            return
        with contextlib.suppress(Exception):
            await self._ws.close(close_code)


def _event_id(event: dict[str, Any] | None) -> str:
    eid = (event or {}).get("event_id")
    return eid if isinstance(eid, str) else ""


def _local_error(err: ClientError, event: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "type": "error",
        "server_event_seq": 0,
        "error": {
            "type": err.type,
            "code": err.code,
            "message": err.message,
            "param": err.param or None,
            "event_id": _event_id(event) or None,
        },
    }
