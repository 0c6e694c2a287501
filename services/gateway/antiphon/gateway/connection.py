"""One WebSocket connection: read, translate, forward; receive, project, write.

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
draining), the connection resumes its session on a live replica with the
last `server_event_seq` it delivered: the client gets exactly the events it
missed (after `session.resumed`, in the duplex dialects), and carries on.

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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import grpc
from opentelemetry import trace
from starlette.websockets import WebSocket, WebSocketDisconnect

from antiphon.common import tracing
from antiphon.common.ids import new_id
from antiphon.gateway.client_close import client_gone, is_last
from antiphon.gateway.dialect import OPENAI, Dialect
from antiphon.gateway.errors import ClientError
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.gateway.outbox import Outbox
from antiphon.gateway.pinned import PinnedConfig
from antiphon.gateway.translator import Translator, metric_label
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import session_pb2_grpc

log = logging.getLogger(__name__)
tracer = trace.get_tracer("antiphon.gateway")

CLOSE_NORMAL = 1000
CLOSE_POLICY = 1008
CLOSE_INTERNAL = 1011
# Service restart: this gateway is going away, the client should come back
# (through another one). The session only detaches (`client_close`).
CLOSE_SERVICE_RESTART = 1012
# Events after which this socket's session stream is over for good.
TERMINAL = {"session_closed", "session_expired", "session_replaced", "resync_required"}
# Refusals of a resume that may pass if it is tried again shortly.
RETRYABLE_REFUSALS = frozenset({"server_error", "rate_limit_error"})
# How long a connection whose client left waits for its session to take the
# news (end, or detach) before dropping the stream, which detaches it anyway.
CLIENT_GONE_WAIT_S = 5.0
# How long the last frames of a closing connection (a slow reader's error,
# its close frame) may wait for the client to read them; past it the socket
# is dropped. Memory meanwhile is one frame and the transport's buffer.
GOODBYE_FLUSH_S = 30.0
# How one session stream ended: the session is over for this socket, the
# session ended the stream without a terminal event (a draining replica, or
# the client left), or the stream was lost.
Relayed = Literal["over", "ended", "lost"]


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
        # The gateway's limits (GatewaySettings owns their defaults).
        max_append_bytes: int,
        first_event_timeout_s: float,
        max_outbox_bytes: int,
        max_pending_commands: int,
        dialect: Dialect = OPENAI,
        pinned: PinnedConfig | None = None,
    ) -> None:
        self._ws = ws
        self._replicas = replicas
        self._metrics = metrics
        self._max_bytes = max_message_bytes
        self._reconnect_timeout_s = reconnect_timeout_s
        self._translator = Translator(dialect.client_types, pinned)
        self._normalize = dialect.normalize
        self._project = dialect.projector()
        self._opens_on_connect = dialect.opens_on_connect
        self._close_code = CLOSE_NORMAL
        self._close_reason = ""
        self._max_append = max_append_bytes
        self._first_event_timeout_s = first_event_timeout_s
        # Bounded both ways: a client that sends faster than its session takes
        # is slowed by TCP (the reader waits for room); one that reads slower
        # than its session speaks is closed (`Outbox`).
        self._commands: asyncio.Queue[spb.ClientCommand] = asyncio.Queue(max_pending_commands)
        self._outbox = Outbox(metrics, limit_bytes=max_outbox_bytes)
        # Any frame from the client: it is there (`first_event_timeout_s`).
        self._heard = False
        self._leave_as: Leaving | None = None
        self._leave_now = asyncio.Event()
        self._identity: Identity | None = None
        self._delivered_seq = 0
        # Set once the client's socket closed: the last command of the connection.
        self._goodbye: spb.ClientCommand | None = None
        # A command taken for a stream that was lost before it took it: it
        # goes first on the next stream, so no command is dropped in between.
        self._unsent: spb.ClientCommand | None = None

    async def run(self) -> None:
        writer = asyncio.create_task(self._write())
        timer = None
        if self._first_event_timeout_s > 0:
            loop = asyncio.get_running_loop()
            timer = loop.call_later(self._first_event_timeout_s, self._no_first_event)
        try:
            first = await self._opening()
            if first is not None:
                await self._serve(first)
        except WebSocketDisconnect:
            pass  # gone before it opened a session: nothing to tell
        finally:
            if timer is not None:
                timer.cancel()
            self._outbox.close()
            # A client that never reads again must not hold the connection
            # open: its last frames get a bounded wait, then the socket goes.
            done, _ = await asyncio.wait({writer}, timeout=GOODBYE_FLUSH_S)
            if not done:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer
            self._outbox.discard()

    # ------------------------------------------------------------ leaving
    def drain(self) -> None:
        """The gateway is draining: detach the session, close with 1012."""
        self._leave(DRAIN)

    def _leave(self, how: Leaving) -> None:
        if self._leave_as is None:
            self._leave_as = how
            self._leave_now.set()

    def _no_first_event(self) -> None:
        if not self._heard:
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
        self._metrics.server_closes.labels(how.reason).inc()
        self._close_code, self._close_reason = how.close_code, how.reason
        if how.error is not None:
            err = how.error
            frames = self._error_frames(err.type, err.code, err.message, err.param)
            self._outbox.close(frames, drop_backlog=how.reason == "slow_consumer")

    async def _opening(self) -> spb.ClientCommand | None:
        """The handshake, unless the gateway leaves first (no session yet)."""
        handshake = asyncio.create_task(self._handshake())
        leave = asyncio.create_task(self._leave_now.wait())
        try:
            await asyncio.wait({handshake, leave}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leave.cancel()
        if handshake.done():
            return handshake.result()
        handshake.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
            await handshake
        assert self._leave_as is not None
        self._say_goodbye(self._leave_as)
        return None

    # -------------------------------------------------------------- read
    async def _receive(self) -> dict[str, Any]:
        """The next client event as a dict; raises ClientError for a malformed frame."""
        message = await self._ws.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", CLOSE_NORMAL))
        self._heard = True
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
            await self._commands.put(command)

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
        socket_reader = asyncio.create_task(self._read_socket())
        # The connection's span is the parent of the session's and stages' spans.
        with tracer.start_as_current_span("gateway.connection"):
            session = asyncio.create_task(self._follow_session(first))
            leave = asyncio.create_task(self._leave_now.wait())
            try:
                done, _ = await asyncio.wait(
                    {socket_reader, session, leave}, return_when=asyncio.FIRST_COMPLETED
                )
                if socket_reader in done:
                    await self._client_left(socket_reader, session)
                elif session not in done:
                    await self._server_leaves(socket_reader, session)
            finally:
                for task in (socket_reader, session, leave):
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
        self._goodbye = client_gone(exc.code)
        clean = self._goodbye.client_gone.clean
        self._metrics.client_closes.labels("clean" if clean else "dropped").inc()
        await self._tell_session(self._goodbye, session)

    async def _server_leaves(
        self, socket_reader: asyncio.Task[None], session: asyncio.Task[None]
    ) -> None:
        """The gateway closes the socket: nothing more is read from the
        client; its session ends (a client at fault) or detaches (a drain),
        then the socket closes with the leaving's code."""
        socket_reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect):
            await socket_reader
        how = self._leave_as
        assert how is not None
        self._say_goodbye(how)
        if how.ends_session:
            self._goodbye = spb.ClientCommand(client_type="session.close", close=spb.CloseSession())
        else:
            self._goodbye = client_gone(how.close_code)
        await self._tell_session(self._goodbye, session)

    async def _tell_session(self, goodbye: spb.ClientCommand, session: asyncio.Task[None]) -> None:
        """Send the connection's last command, and give the session a moment
        to take it (both waits bounded: the stream may be lost meanwhile)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._commands.put(goodbye), CLIENT_GONE_WAIT_S)
        await asyncio.wait({session}, timeout=CLIENT_GONE_WAIT_S)

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
            call = stub.Connect(metadata=tracing.inject_metadata())
            sender = asyncio.create_task(self._send(call, command))
            try:
                relayed = await self._relay(call, failing_over=bool(deadline))
            finally:
                # This stream's sender stops here: commands wait for the next one.
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
            if relayed == "over" or (relayed == "ended" and self._goodbye is not None):
                return
            if self._goodbye is not None and self._unsent is None and self._commands.empty():
                # The lost stream took the goodbye with it: the next one says it again.
                self._commands.put_nowait(self._goodbye)
            # Lost: open again elsewhere if the session never answered (nothing
            # was opened), else resume from the last event this socket delivered.
            if not deadline:
                deadline = loop.time() + self._reconnect_timeout_s
            if loop.time() > deadline:
                self._close_code = CLOSE_INTERNAL
                self._local_error(
                    "server_error", "session_unavailable", "the session service is unavailable"
                )
                self._outbox.close()
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

    async def _send(self, call: Any, first: spb.ClientCommand) -> None:
        """Write one stream's commands, `first` first, in the order the socket
        read them. Owned by the stream, so it ends with it: a command read
        after the stream was lost waits for the next stream, never for a dead one."""
        try:
            await call.write(first)
            while True:
                if self._unsent is None:
                    self._unsent = await self._commands.get()
                await call.write(self._unsent)
                cmd, self._unsent = self._unsent, None
                if is_last(cmd):
                    # Half-closed: the session ends the stream once it has heard.
                    await call.done_writing()
                    return
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            return  # the stream is over; `_relay` says how

    async def _relay(self, call: Any, *, failing_over: bool = False) -> Relayed:
        """Forward one stream's events until the session is over for this
        socket, the session ends the stream, or the stream is lost.

        `failing_over`: the stream is this connection's own resume after a
        lost one. A refusal that may pass (no stage worker free yet, the
        replica busy) counts as lost, so the resume is tried again until the
        reconnect deadline, and the client never sees it."""
        try:
            async for ev in call:
                kind = ev.WhichOneof("kind")
                if failing_over and kind == "error" and ev.seq == 0:
                    if ev.error.type in RETRYABLE_REFUSALS:
                        log.warning("fail-over resume refused", extra={"code": ev.error.code})
                        return "lost"
                self._remember(ev, kind)
                for frame in self._project(ev):
                    self._deliver(frame)
                if kind in TERMINAL or (kind == "error" and ev.seq == 0):
                    self._outbox.close()
                    return "over"
        except grpc.aio.AioRpcError as exc:
            log.warning("session stream lost", extra={"code": str(exc.code())})
            return "lost"
        # Ended without a terminal event: the replica is draining (or the
        # client left and the session detached).
        return "ended"

    def _remember(self, ev: spb.ServerEvent, kind: str | None) -> None:
        if kind == "session_created":
            st = ev.session_created
            self._identity = Identity(st.session_id, st.incarnation, st.resume_token)
        elif kind == "session_resumed":
            r = ev.session_resumed
            if self._identity is None:
                # The client's own `session.resume`: this socket can fail over
                # too, from the cursor the client said it holds (this event's seq).
                self._identity = Identity(r.session_id, r.incarnation, r.resume_token)
                self._delivered_seq = ev.seq
            self._identity.resume_token = r.resume_token
            if r.HasField("session"):
                self._translator.adopt(r.session.config)
        if kind not in ("session_resumed", "session_replaced", "resync_required"):
            # Attachment-scoped events carry a cursor, not a journal position.
            self._delivered_seq = max(self._delivered_seq, ev.seq)

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
                await self._ws.send_text(text)
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
