"""One WebSocket connection: read, translate, forward; receive, project, write.

Exactly one task writes to the socket (the writer), so events keep the
order the session gave them. The route picks the dialect (Realtime, or the
native `/v1/duplex` names); the connection holds that dialect's projector.
A refused client event is sent to the session as `rejected`, which journals
the error so it gets a `server_event_seq`.

When the stream to the session service is lost (a replica died or is
draining), the connection resumes its session on a live replica with the
last `server_event_seq` it delivered: the client sees `session.resumed`,
then exactly the events it missed, and carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry import trace
from starlette.websockets import WebSocket, WebSocketDisconnect

from antiphon.common import tracing
from antiphon.common.ids import new_id
from antiphon.gateway.audio_formats import OutputAudio
from antiphon.gateway.dialect import REALTIME, Dialect
from antiphon.gateway.errors import ClientError
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.gateway.translator import Translator, metric_label
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import session_pb2_grpc

log = logging.getLogger(__name__)
tracer = trace.get_tracer("antiphon.gateway")

CLOSE_NORMAL = 1000
CLOSE_INTERNAL = 1011
# Events after which this socket's session stream is over for good.
TERMINAL = {"session_closed", "session_expired", "session_replaced", "resync_required"}


@dataclass
class Identity:
    """What this connection needs to resume its session elsewhere."""

    session_id: str
    incarnation: int
    resume_token: str


class Connection:
    def __init__(
        self,
        ws: WebSocket,
        replicas: Sequence[grpc.aio.Channel],
        metrics: GatewayMetrics,
        *,
        max_message_bytes: int,
        reconnect_timeout_s: float,
        dialect: Dialect = REALTIME,
    ) -> None:
        self._ws = ws
        self._replicas = replicas
        self._metrics = metrics
        self._max_bytes = max_message_bytes
        self._reconnect_timeout_s = reconnect_timeout_s
        self._translator = Translator()
        self._output_audio = OutputAudio()
        self._normalize = dialect.normalize
        self._project = dialect.projector()
        self._close_code = CLOSE_NORMAL
        self._commands: asyncio.Queue[spb.ClientCommand] = asyncio.Queue()
        self._outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._identity: Identity | None = None
        self._delivered_seq = 0

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        try:
            first = await self._handshake()
            await self._serve(first)
        except WebSocketDisconnect:
            pass
        finally:
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
        return self._normalize(event)

    async def _handshake(self) -> spb.ClientCommand:
        """Wait for the opening `session.update` (or `session.resume`)."""
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
                self._outbox.put_nowait(
                    self._local_error(err.type, err.code, err.message, err.param, _event_id(event))
                )

    async def _read_socket(self) -> None:
        """Client events -> commands, for the life of the connection."""
        while True:
            event: dict[str, Any] | None = None
            try:
                event = await self._receive()
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

    # ----------------------------------------------------------- session
    async def _serve(self, first: spb.ClientCommand) -> None:
        socket_reader = asyncio.create_task(self._read_socket())
        # The connection's span is the parent of the session's and stages' spans.
        with tracer.start_as_current_span("gateway.connection"):
            session = asyncio.create_task(self._follow_session(first))
            try:
                done, _ = await asyncio.wait(
                    {socket_reader, session}, return_when=asyncio.FIRST_COMPLETED
                )
                if socket_reader in done:
                    socket_reader.result()  # re-raise the client's disconnect
            finally:
                for task in (socket_reader, session):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
                        await task

    async def _follow_session(self, first: spb.ClientCommand) -> None:
        """Stream the session's events; resume on another replica when the stream is lost."""
        loop = asyncio.get_running_loop()
        command, replica, deadline, backoff = first, 0, 0.0, 0.1
        while True:
            channel = self._replicas[replica % len(self._replicas)]
            if deadline:
                # Resuming: skip a replica that does not come up in time.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(channel.channel_ready(), 1.0)
            stub = session_pb2_grpc.SessionServiceStub(channel)
            call = stub.Connect(self._requests(command), metadata=tracing.inject_metadata())
            if await self._relay(call):
                return
            # Lost: open again elsewhere if the session never answered (nothing
            # was opened), else resume from the last event this socket delivered.
            if not deadline:
                deadline = loop.time() + self._reconnect_timeout_s
            if loop.time() > deadline:
                self._close_code = CLOSE_INTERNAL
                self._outbox.put_nowait(
                    self._local_error(
                        "server_error", "session_unavailable", "the session service is unavailable"
                    )
                )
                self._outbox.put_nowait(None)
                return
            self._metrics.reconnects.inc()
            replica += 1
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
            if self._identity is None:
                continue
            command = spb.ClientCommand(
                client_type="session.resume",
                resume=spb.ResumeSession(
                    session_id=self._identity.session_id,
                    incarnation=self._identity.incarnation,
                    resume_token=self._identity.resume_token,
                    last_received_seq=self._delivered_seq,
                ),
            )

    async def _requests(self, first: spb.ClientCommand) -> AsyncIterator[spb.ClientCommand]:
        yield first
        while True:
            yield await self._commands.get()

    async def _relay(self, call: Any) -> bool:
        """Forward one stream's events; True when the session is over for this
        socket, False when the stream was lost and should be resumed."""
        try:
            async for ev in call:
                kind = ev.WhichOneof("kind")
                self._remember(ev, kind)
                # Audio deltas leave in the session's output encoding (G.711 or PCM16).
                encoded = self._output_audio.apply(ev)
                frame = self._project(ev)
                if encoded:
                    frame["format"] = encoded
                self._outbox.put_nowait(frame)
                if kind in TERMINAL or (kind == "error" and ev.seq == 0):
                    self._outbox.put_nowait(None)
                    return True
        except grpc.aio.AioRpcError as exc:
            log.warning("session stream lost", extra={"code": str(exc.code())})
            return False
        # Ended without a terminal event: the replica is draining.
        return False

    def _remember(self, ev: spb.ServerEvent, kind: str | None) -> None:
        if kind == "session_created":
            st = ev.session_created
            self._identity = Identity(st.session_id, st.incarnation, st.resume_token)
        elif kind == "session_resumed" and self._identity is not None:
            self._identity.resume_token = ev.session_resumed.resume_token
        if kind not in ("session_resumed", "session_replaced", "resync_required"):
            # Attachment-scoped events carry a cursor, not a journal position.
            self._delivered_seq = max(self._delivered_seq, ev.seq)

    def _local_error(
        self, type_: str, code: str, message: str, param: str = "", event_id: str = ""
    ) -> dict[str, Any]:
        """An error no session journaled: seq 0, in this socket's dialect."""
        error = spb.ErrorEvent(
            type=type_, code=code, message=message, param=param, event_id=event_id
        )
        return self._project(spb.ServerEvent(seq=0, event_id=new_id("event"), error=error))

    # ------------------------------------------------------------- write
    async def _write(self) -> None:
        try:
            while (event := await self._outbox.get()) is not None:
                self._metrics.events_out.labels(event["type"]).inc()
                await self._ws.send_text(json.dumps(event, separators=(",", ":")))
        except Exception:
            return
        with contextlib.suppress(Exception):
            await self._ws.close(self._close_code)


def _event_id(event: dict[str, Any] | None) -> str:
    eid = (event or {}).get("event_id")
    return eid if isinstance(eid, str) else ""
