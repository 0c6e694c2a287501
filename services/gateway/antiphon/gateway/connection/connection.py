"""One client connection (a WebSocket, or a WebRTC call through
call_socket.py): read, translate, forward; receive, project, write.

Exactly one task writes to the socket (the writer), so events keep the
order the session gave them. The route picks the dialect (OpenAI's, the
duplex extensions of `?duplex=1`, the native `/v1/duplex` names, or
GPT-Live's); the connection holds that dialect's two halves, whose
projector may send nothing for an event its dialect has no name for (or
hold a frame back to keep its dialect's order). A dialect may answer an
event itself, send frames of its own (GPT-Live's output track, clocked by
the client's audio) or end the session (`Lent`). OpenAI's dialect opens the session as the socket is
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
Where the connection is in its life is `connection_state`'s: each step
below is a move of its state, and how the socket closes is decided by the
move into `Closing`.

A socket that plays the answer's audio itself (a WebRTC call's track,
`ClientSocket.audio_out`) gets the session's typed audio deltas, never
their JSON; what it reads may be a typed command it made (a call's
microphone as raw PCM) instead of a client event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Any

import grpc
from opentelemetry import trace
from starlette.websockets import WebSocketDisconnect

from antiphon.common.event_kinds import kind_of
from antiphon.common.ids import new_id
from antiphon.gateway.connection.client_close import client_gone
from antiphon.gateway.connection.client_socket import ClientSocket
from antiphon.gateway.connection.close_codes import CLOSE_INTERNAL, CLOSE_NORMAL, CLOSE_POLICY
from antiphon.gateway.connection.connection_state import (
    DRAIN,
    ClientGone,
    Closed,
    Closing,
    ConnectionState,
    Leaving,
    Opening,
    Serving,
)
from antiphon.gateway.connection.failover import FailOver, GrpcReplicas, SessionUnavailable
from antiphon.gateway.connection.failover_state import Retry
from antiphon.gateway.connection.outbox import Outbox
from antiphon.gateway.dialects.dialect import OPENAI, Dialect
from antiphon.gateway.dialects.halves import Lent
from antiphon.gateway.edge.pinned import PinnedConfig
from antiphon.gateway.errors import ClientError
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.gateway.translate.commands import within_append_limit
from antiphon.gateway.translate.fields import client_event_id
from antiphon.gateway.translate.translator import metric_label
from antiphon.v1 import session_pb2 as spb

tracer = trace.get_tracer("antiphon.gateway")

# How long a connection whose client left waits for its session to take the
# news (end, or detach) before dropping the stream, which detaches it anyway.
CLIENT_GONE_WAIT_S = 5.0
# How long the last frames of a closing connection (a slow reader's error,
# its close frame) may wait for the client to read them; past it the socket
# is dropped. Memory meanwhile is one frame and the transport's buffer.
GOODBYE_FLUSH_S = 30.0
# What a played audio delta counts as, as the event it would have been.
AUDIO_DELTA = "response.output_audio.delta"


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
        self._audio_out = ws.audio_out
        self._metrics = metrics
        self._max_bytes = max_message_bytes
        lent = Lent(
            say=self._deliver,
            refuse=self._refuse,
            pinned=pinned,
            max_append_bytes=max_append_bytes,
        )
        self._translator, self._project = dialect.connection_halves(lent)
        self._normalize = dialect.normalize
        self._client_types = dialect.client_types
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
        # Open until the client's first frame (`first_event_timeout_s`): its
        # end only cancels the timer, which can only lead to a `Leaving`.
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
            if not isinstance(self._state.state, Closing):
                self._close(self._state.closing())
            # A client that never reads again must not hold the connection
            # open: its last frames get a bounded wait, then the socket goes.
            done, _ = await asyncio.wait({writer}, timeout=GOODBYE_FLUSH_S)
            if not done:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer
            self._outbox.discard()
            self._state.to(Closed())

    # ------------------------------------------------------------ leaving
    def drain(self) -> None:
        """The gateway is draining: detach the session, close with 1012."""
        self._leave(DRAIN)

    def _leave(self, how: Leaving) -> None:
        """The gateway closes this socket, unless it is already ending (the
        first reason wins): count it, tell its error (ahead of a slow reader's
        backlog, which its journal keeps) and close with its code; a drain
        closes once its session detached."""
        if not self._state.may(Leaving):
            return
        self._state.to(how)
        self._metrics.server_closes.labels(how.reason).inc()
        if how.error is not None:
            err = how.error
            frames = self._error_frames(err.type, err.code, err.message, err.param)
            self._close(self._state.closing(), frames, drop_backlog=how.reason == "slow_consumer")

    def _close(
        self,
        closing: Closing,
        last: list[dict[str, Any]] | None = None,
        *,
        drop_backlog: bool = False,
    ) -> None:
        """No more frames but `last`; the writer then closes as `closing` says."""
        self._state.to(closing)
        self._outbox.close(closing, last, drop_backlog=drop_backlog)

    def _refuse(self, error: ClientError) -> None:
        """The dialect refuses this session (`Lent.refuse`): it ends, with `error`."""
        self._leave(Leaving(error.code, CLOSE_POLICY, error, ends_session=True))

    def _end_first_event_window(self) -> None:
        """The client sent a frame (or is gone): its first-event window closes."""
        if self._first_event_window is not None:
            self._first_event_window.cancel()

    def _no_first_event(self) -> None:
        error = ClientError(
            "first_event_timeout",
            f"no client event within {self._first_event_timeout_s:g} s of connecting",
        )
        self._leave(Leaving("first_event_timeout", CLOSE_POLICY, error, ends_session=True))

    def _deliver(self, frame: dict[str, Any]) -> None:
        """One frame for the client; a backlog past the outbox's limit means
        the client reads too slowly for its own session: it is closed."""
        if self._writable() and not self._outbox.put(frame):
            self._too_slow()

    def _deliver_audio(self, delta: spb.AudioDelta) -> None:
        if self._writable() and not self._outbox.put_audio(delta):
            self._too_slow()

    def _writable(self) -> bool:
        """Frames are taken until the connection closes (its last frames are in)."""
        return not isinstance(self._state.state, Closing | Closed)

    def _too_slow(self) -> None:
        error = ClientError(
            "slow_consumer",
            "the client did not read its events fast enough; "
            f"more than {self._outbox.limit_bytes} bytes were waiting",
        )
        self._leave(Leaving("slow_consumer", CLOSE_POLICY, error, ends_session=True))

    async def _opening(self) -> spb.ClientCommand | None:
        """The handshake, unless the gateway leaves first (no session yet)."""
        handshake = asyncio.create_task(self._handshake())
        either: set[asyncio.Future[Any]] = {handshake, self._state.left}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if handshake.done() and isinstance(self._state.state, Opening):
            return handshake.result()
        handshake.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
            await handshake
        return None

    # -------------------------------------------------------------- read
    async def _receive(self) -> dict[str, Any] | spb.ClientCommand:
        """The next client event as a dict (or a command the socket typed
        itself); raises ClientError for a malformed frame."""
        message = await self._ws.receive()
        if isinstance(message, spb.ClientCommand):
            self._end_first_event_window()
            return message
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
                self._local_error(err.type, err.code, err.message, err.param)
                self._close(Closing(CLOSE_POLICY))
                return None
        while True:
            event: dict[str, Any] | None = None
            try:
                received = await self._receive()
                # A command the socket typed (a call's microphone) opens
                # nothing: refused as the event it stands for would be.
                event = (
                    {"type": received.client_type}
                    if isinstance(received, spb.ClientCommand)
                    else received
                )
                self._metrics.events_in.labels(metric_label(event, self._client_types)).inc()
                return self._translator.open(event, query)
            except ClientError as err:
                self._metrics.client_errors.labels(err.code).inc()
                # No session yet, so nothing is journaled: seq 0 marks it.
                self._local_error(
                    err.type, err.code, err.message, err.param, client_event_id(event)
                )

    async def _read_socket(self) -> None:
        """Client events -> commands, for the life of the connection."""
        while True:
            event: dict[str, Any] | None = None
            try:
                received = await self._receive()
                if isinstance(received, spb.ClientCommand):
                    self._metrics.events_in.labels(received.client_type).inc()
                    command = self._checked(received)
                else:
                    event = received
                    self._metrics.events_in.labels(metric_label(event, self._client_types)).inc()
                    translated = self._translator.translate(event)
                    if translated is None:
                        continue  # answered by the dialect itself
                    command = self._checked(translated)
            except ClientError as err:
                self._metrics.client_errors.labels(err.code).inc()
                rejected = spb.ErrorEvent(
                    type=err.type,
                    code=err.code,
                    message=err.message,
                    param=err.param,
                    event_id=client_event_id(event),
                )
                command = spb.ClientCommand(rejected=rejected)
            # Waits while the session stream is behind: the socket is not read
            # meanwhile, so TCP slows a client that sends faster than that.
            await self._session.put(command)

    def _checked(self, cmd: spb.ClientCommand) -> spb.ClientCommand:
        """A command within the limits no client can raise."""
        return within_append_limit(cmd, self._max_append)

    # ----------------------------------------------------------- session
    async def _serve(self, first: spb.ClientCommand) -> None:
        self._state.to(Serving())
        socket_reader = asyncio.create_task(self._read_socket())
        # The connection's span is the parent of the session's and stages' spans.
        with tracer.start_as_current_span("gateway.connection"):
            session = asyncio.create_task(self._follow(first))
            first_of: set[asyncio.Future[Any]] = {socket_reader, session, self._state.left}
            try:
                done, _ = await asyncio.wait(first_of, return_when=asyncio.FIRST_COMPLETED)
                # The gateway's own decision stands, even if the client went meanwhile.
                if self._state.left.done():
                    await self._server_leaves(socket_reader, session)
                elif session not in done:
                    await self._client_left(socket_reader, session)
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
        self._state.to(ClientGone())
        goodbye = client_gone(exc.code)
        clean = goodbye.client_gone.clean
        self._metrics.client_closes.labels("clean" if clean else "dropped").inc()
        await self._tell_session(goodbye, session)

    async def _server_leaves(
        self, socket_reader: asyncio.Task[None], session: asyncio.Task[None]
    ) -> None:
        """The gateway closes the socket: nothing more is read from the
        client; its session ends (a client at fault) or detaches (a drain)."""
        socket_reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
            await socket_reader
        how = self._state.left.result()
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
        socket; then the connection closes (1011 after an error if no replica
        took the session back in time, unless the gateway was leaving: its
        own close stands)."""
        try:
            await self._session.follow(first)
            closing = self._state.closing()
        except SessionUnavailable as err:
            self._local_error(err.type, err.code, err.message)
            leaving = isinstance(self._state.state, Leaving)
            closing = self._state.closing() if leaving else Closing(CLOSE_INTERNAL)
        if self._writable():
            self._close(closing)

    def _on_event(self, ev: spb.ServerEvent) -> None:
        """One session event, in the session's order: in this socket's dialect,
        or as the audio itself to a socket that plays it."""
        kind = kind_of(ev)
        if kind == "audio_delta" and self._audio_out is not None:
            # Past the projector: it holds back only a user item's frames, which
            # the session sends together with their commit, never around audio.
            self._deliver_audio(ev.audio_delta)
            return
        if kind == "session_resumed" and ev.session_resumed.HasField("session"):
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
            while not isinstance(frame := await self._outbox.get(), Closing):
                if isinstance(frame, spb.AudioDelta):
                    self._metrics.events_out.labels(AUDIO_DELTA).inc()
                    if self._audio_out is not None:
                        self._audio_out.play(frame)
                    continue
                kind, text = frame
                self._metrics.events_out.labels(kind).inc()
                await self._ws.send(kind, text)
        except Exception:
            return
        with contextlib.suppress(Exception):
            await self._ws.close(frame.code, frame.reason or None)
