"""One client connection (a WebSocket, or a WebRTC call through
call_socket.py): read, translate, forward; receive, project, write.

Exactly one task writes to the socket (the writer), so events keep the
order the session gave them. The route picks the dialect (OpenAI's, the
duplex extensions of `?duplex=1`, or the native `/v1/duplex` names); the
connection holds that dialect's projector, which may send nothing for an
event its dialect has no name for (or hold a frame back to keep its
dialect's order). OpenAI's dialect opens the session as the socket is
accepted (`session.created` first, with the server's defaults); the others
open on the client's first `session.update` or `session.resume`.
A refused client event is sent to the session as `rejected`, which journals
the error so it gets a `server_event_seq`.

When the stream to the session service is lost (a replica died or is
draining), the connection's fail-over part (`failover`) resumes its session
on a live replica with the last `server_event_seq` it delivered: the client
gets exactly the events it missed (after `session.resumed`, in the duplex
dialects), and carries on.

When the client's socket closes, the session is told how (`client_gone`):
a goodbye ends it, a drop detaches it (see `client_close`). The connection
waits a moment for the session to take the news, so that its slots are
free before the next client of the same user arrives.

The gateway may close a socket itself (`Leaving`): a client that sends no
event in its first-event window, or reads slower than its session speaks
(its bounded outbox overflows), gets a typed error and its session ends;
a draining gateway detaches each session and closes with 1012, so the
client resumes it elsewhere. Both queues are bounded: commands wait for
room (TCP slows the client), frames past the outbox's limit close it.
Where the connection is in its life is `connection_state`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from opentelemetry import trace
from starlette.websockets import WebSocket, WebSocketDisconnect

from antiphon.common.event_kinds import kind_of
from antiphon.common.ids import new_id
from antiphon.gateway.connection.client_close import client_gone
from antiphon.gateway.connection.close_codes import (
    CLOSE_INTERNAL,
    CLOSE_NORMAL,
    CLOSE_POLICY,
    CLOSE_SERVICE_RESTART,
)
from antiphon.gateway.connection.connection_state import ConnectionState, State
from antiphon.gateway.connection.failover import FailOver, GrpcReplicas, Retry, SessionUnavailable
from antiphon.gateway.connection.outbox import Outbox
from antiphon.gateway.dialects.dialect import OPENAI, Dialect
from antiphon.gateway.edge.pinned import PinnedConfig
from antiphon.gateway.errors import ClientError
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.gateway.translate.translator import Translator, metric_label
from antiphon.v1 import session_pb2 as spb

tracer = trace.get_tracer("antiphon.gateway")

# How long a connection whose client left waits for its session to take the
# news (end, or detach) before dropping the stream, which detaches it anyway.
CLIENT_GONE_WAIT_S = 5.0
# How long the last frames of a closing connection (a slow reader's error,
# its close frame) may wait for the client to read them; past it the socket
# is dropped. Memory meanwhile is one frame and the transport's buffer.
GOODBYE_FLUSH_S = 30.0


@dataclass(frozen=True)
class Leaving:
    """The gateway closes this socket on its own: why (a metric label and the
    close reason), with which close code, the error told first (if any), and
    whether the session ends (a client at fault) or only detaches (a drain:
    the client resumes it elsewhere)."""

    reason: str
    close_code: int
    error: ClientError | None
    ends_session: bool


DRAIN = Leaving("service_restart", CLOSE_SERVICE_RESTART, None, ends_session=False)


class ClientSocket(Protocol):
    """What a connection reads and writes its client's events through: a
    WebSocket (`WebSocketClient`), or a WebRTC call's data channel and
    media (call_socket.CallSocket). `receive` gives ASGI WebSocket messages
    (`websocket.receive` with `text`, or `websocket.disconnect`)."""

    @property
    def query_params(self) -> Mapping[str, str]: ...

    async def receive(self) -> Mapping[str, Any]: ...

    async def send(self, kind: str, text: str) -> None:
        """One server event: its type, and its JSON."""

    async def close(self, code: int, reason: str | None) -> None: ...


class WebSocketClient:
    """A Starlette WebSocket as a `ClientSocket`."""

    def __init__(self, ws: WebSocket) -> None:
        self._ws = ws

    @property
    def query_params(self) -> Mapping[str, str]:
        return self._ws.query_params

    async def receive(self) -> Mapping[str, Any]:
        return await self._ws.receive()

    async def send(self, kind: str, text: str) -> None:
        await self._ws.send_text(text)

    async def close(self, code: int, reason: str | None) -> None:
        await self._ws.close(code, reason)


class Connection:
    def __init__(
        self,
        ws: ClientSocket,
        replicas: Sequence[grpc.aio.Channel],
        metrics: GatewayMetrics,
        *,
        max_message_bytes: int,
        reconnect_timeout_s: float,
        # The gateway's limits (GatewaySettings owns their defaults).
        max_append_bytes: int,
        first_event_timeout_s: float,
        max_outbox_bytes: int,
        max_pending_commands: int,
        dialect: Dialect = OPENAI,
        pinned: PinnedConfig | None = None,
    ) -> None:
        self._ws = ws
        self._metrics = metrics
        self._max_bytes = max_message_bytes
        self._translator = Translator(dialect.client_types, pinned)
        self._normalize = dialect.normalize
        self._project = dialect.projector()
        self._opens_on_connect = dialect.opens_on_connect
        self._max_append = max_append_bytes
        self._first_event_timeout_s = first_event_timeout_s
        # Bounded both ways: a client that sends faster than its session takes
        # is slowed by TCP (the reader waits for room in the session's
        # commands); one that reads slower than its session speaks is closed.
        self._outbox = Outbox(metrics, limit_bytes=max_outbox_bytes)
        self._session = FailOver(
            GrpcReplicas(replicas),
            self._on_event,
            metrics,
            Retry(reconnect_timeout_s),
            max_pending_commands=max_pending_commands,
        )
        self._state = ConnectionState()
        # What the writer closes the socket with, once the last frame is out.
        self._close_code, self._close_reason = CLOSE_NORMAL, ""
        # The first reason the gateway gave to close this socket wins.
        self._leaving: asyncio.Future[Leaving] = asyncio.get_running_loop().create_future()
        # Open until the client's first frame (`first_event_timeout_s`).
        self._first_event_window: asyncio.TimerHandle | None = None

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        if self._first_event_timeout_s > 0:
            loop = asyncio.get_running_loop()
            self._first_event_window = loop.call_later(
                self._first_event_timeout_s, self._no_first_event
            )
        try:
            first = await self._opening()
            if first is not None:
                await self._serve(first)
        except WebSocketDisconnect:
            pass  # gone before it opened a session: nothing to tell
        finally:
            self._end_first_event_window()
            self._state.to(State.CLOSING)
            self._outbox.close()
            # A client that never reads again must not hold the connection
            # open: its last frames get a bounded wait, then the socket goes.
            done, _ = await asyncio.wait({writer}, timeout=GOODBYE_FLUSH_S)
            if not done:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer
            self._outbox.discard()
            self._state.to(State.CLOSED)

    # ------------------------------------------------------------ leaving
    def drain(self) -> None:
        """The gateway is draining: detach the session, close with 1012."""
        self._leave(DRAIN)

    def _leave(self, how: Leaving) -> None:
        if not self._leaving.done():
            self._leaving.set_result(how)

    def _end_first_event_window(self) -> None:
        """The client sent a frame (or is gone): its first-event window closes."""
        if self._first_event_window is not None:
            self._first_event_window.cancel()
            self._first_event_window = None

    def _no_first_event(self) -> None:
        error = ClientError(
            "first_event_timeout",
            f"no client event within {self._first_event_timeout_s:g} s of connecting",
        )
        self._leave(Leaving("first_event_timeout", CLOSE_POLICY, error, ends_session=True))

    def _deliver(self, frame: dict[str, Any]) -> None:
        """One frame for the client; a backlog past the outbox's limit means
        the client reads too slowly for its own session: it is closed."""
        if not self._outbox.put(frame) and not self._outbox.closed:
            error = ClientError(
                "slow_consumer",
                "the client did not read its events fast enough; "
                f"more than {self._outbox.limit_bytes} bytes were waiting",
            )
            self._leave(Leaving("slow_consumer", CLOSE_POLICY, error, ends_session=True))

    def _say_goodbye(self, how: Leaving) -> None:
        """Count the leaving; tell its error (ahead of a slow reader's backlog,
        which its journal keeps), and close with its code."""
        self._state.to(State.LEAVING)
        self._metrics.server_closes.labels(how.reason).inc()
        self._close_code, self._close_reason = how.close_code, how.reason
        if how.error is not None:
            err = how.error
            frames = self._error_frames(err.type, err.code, err.message, err.param)
            self._outbox.close(frames, drop_backlog=how.reason == "slow_consumer")

    async def _opening(self) -> spb.ClientCommand | None:
        """The handshake, unless the gateway leaves first (no session yet)."""
        handshake = asyncio.create_task(self._handshake())
        either: set[asyncio.Future[Any]] = {handshake, self._leaving}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if handshake.done():
            return handshake.result()
        handshake.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
            await handshake
        self._say_goodbye(self._leaving.result())
        return None

    # -------------------------------------------------------------- read
    async def _receive(self) -> dict[str, Any]:
        """The next client event as a dict; raises ClientError for a malformed frame."""
        message = await self._ws.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", CLOSE_NORMAL))
        self._end_first_event_window()
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

    async def _handshake(self) -> spb.ClientCommand | None:
        """The command that opens the session: at once where the dialect opens
        on connect (None, after an error, when the URL cannot open one), else
        the client's opening `session.update` (or `session.resume`)."""
        query = dict(self._ws.query_params)
        if self._opens_on_connect:
            try:
                return self._translator.connect(query)
            except ClientError as err:
                self._metrics.client_errors.labels(err.code).inc()
                self._close_code = CLOSE_POLICY
                self._local_error(err.type, err.code, err.message, err.param)
                return None
        while True:
            event: dict[str, Any] | None = None
            try:
                event = await self._receive()
                self._metrics.events_in.labels(metric_label(event)).inc()
                return self._translator.open(event, query)
            except ClientError as err:
                self._metrics.client_errors.labels(err.code).inc()
                # No session yet, so nothing is journaled: seq 0 marks it.
                self._local_error(err.type, err.code, err.message, err.param, _event_id(event))

    async def _read_socket(self) -> None:
        """Client events -> commands, for the life of the connection."""
        while True:
            event: dict[str, Any] | None = None
            try:
                event = await self._receive()
                self._metrics.events_in.labels(metric_label(event)).inc()
                command = self._checked(self._translator.translate(event))
            except ClientError as err:
                self._metrics.client_errors.labels(err.code).inc()
                rejected = spb.ErrorEvent(
                    type=err.type,
                    code=err.code,
                    message=err.message,
                    param=err.param,
                    event_id=_event_id(event),
                )
                command = spb.ClientCommand(rejected=rejected)
            # Waits while the session stream is behind: the socket is not read
            # meanwhile, so TCP slows a client that sends faster than that.
            await self._session.put(command)

    def _checked(self, cmd: spb.ClientCommand) -> spb.ClientCommand:
        """A command within the limits no client can raise."""
        if (
            cmd.WhichOneof("kind") == "append_audio"
            and len(cmd.append_audio.pcm16) > self._max_append
        ):
            # On the decoded audio, as OpenAI counts it (G.711 counts as the
            # PCM16 it becomes: that is what crosses to the session).
            raise ClientError(
                "audio_too_large",
                f"an append may carry at most {self._max_append} bytes of audio",
                param="audio",
            )
        return cmd

    # ----------------------------------------------------------- session
    async def _serve(self, first: spb.ClientCommand) -> None:
        self._state.to(State.SERVING)
        socket_reader = asyncio.create_task(self._read_socket())
        # The connection's span is the parent of the session's and stages' spans.
        with tracer.start_as_current_span("gateway.connection"):
            session = asyncio.create_task(self._follow(first))
            first_of: set[asyncio.Future[Any]] = {socket_reader, session, self._leaving}
            try:
                done, _ = await asyncio.wait(first_of, return_when=asyncio.FIRST_COMPLETED)
                if socket_reader in done:
                    await self._client_left(socket_reader, session)
                elif session not in done:
                    await self._server_leaves(socket_reader, session)
            finally:
                for task in (socket_reader, session):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
                        await task

    async def _client_left(
        self, socket_reader: asyncio.Task[None], session: asyncio.Task[None]
    ) -> None:
        """The socket closed: tell the session how, and give it a moment."""
        exc = socket_reader.exception()
        if not isinstance(exc, WebSocketDisconnect):
            socket_reader.result()  # anything else is a failure of our own
            return
        self._state.to(State.CLIENT_GONE)
        goodbye = client_gone(exc.code)
        clean = goodbye.client_gone.clean
        self._metrics.client_closes.labels("clean" if clean else "dropped").inc()
        await self._tell_session(goodbye, session)

    async def _server_leaves(
        self, socket_reader: asyncio.Task[None], session: asyncio.Task[None]
    ) -> None:
        """The gateway closes the socket: nothing more is read from the
        client; its session ends (a client at fault) or detaches (a drain),
        then the socket closes with the leaving's code."""
        socket_reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
            await socket_reader
        how = self._leaving.result()
        self._say_goodbye(how)
        if how.ends_session:
            goodbye = spb.ClientCommand(client_type="session.close", close=spb.CloseSession())
        else:
            goodbye = client_gone(how.close_code)
        await self._tell_session(goodbye, session)

    async def _tell_session(self, goodbye: spb.ClientCommand, session: asyncio.Task[None]) -> None:
        """Send the connection's last command, and give the session a moment
        to take it (both waits bounded: the stream may be lost meanwhile)."""
        await self._session.say_last(goodbye, wait_s=CLIENT_GONE_WAIT_S)
        await asyncio.wait({session}, timeout=CLIENT_GONE_WAIT_S)

    async def _follow(self, first: spb.ClientCommand) -> None:
        """The session's events, across replicas, until it is over for this
        socket; then the outbox closes (after an error if no replica took the
        session back in time)."""
        try:
            await self._session.follow(first)
        except SessionUnavailable as err:
            self._close_code = CLOSE_INTERNAL
            self._local_error(err.type, err.code, err.message)
        self._outbox.close()

    def _on_event(self, ev: spb.ServerEvent) -> None:
        """One session event, in the session's order: in this socket's dialect."""
        if kind_of(ev) == "session_resumed" and ev.session_resumed.HasField("session"):
            self._translator.adopt(ev.session_resumed.session.config)
        for frame in self._project(ev):
            self._deliver(frame)

    def _local_error(
        self, type_: str, code: str, message: str, param: str = "", event_id: str = ""
    ) -> None:
        """Send an error no session journaled: seq 0, in this socket's dialect."""
        for frame in self._error_frames(type_, code, message, param, event_id):
            self._deliver(frame)

    def _error_frames(
        self, type_: str, code: str, message: str, param: str = "", event_id: str = ""
    ) -> list[dict[str, Any]]:
        error = spb.ErrorEvent(
            type=type_, code=code, message=message, param=param, event_id=event_id
        )
        return list(self._project(spb.ServerEvent(seq=0, event_id=new_id("event"), error=error)))

    # ------------------------------------------------------------- write
    async def _write(self) -> None:
        try:
            while (frame := await self._outbox.get()) is not None:
                kind, text = frame
                self._metrics.events_out.labels(kind).inc()
                await self._ws.send(kind, text)
        except Exception:
            return
        with contextlib.suppress(Exception):
            await self._ws.close(self._close_code, self._close_reason or None)


def _event_id(event: dict[str, Any] | None) -> str:
    eid = (event or {}).get("event_id")
    if not isinstance(eid, str):
        return ""
    try:
        eid.encode()
    except UnicodeEncodeError:  # a lone surrogate (JSON may escape one) fits no protobuf string
        return ""
    return eid
