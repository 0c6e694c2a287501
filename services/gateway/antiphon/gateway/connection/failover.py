"""One socket's session stream, resumed on another session replica when it is lost.

The stream to the session service is lost when a replica dies or drains.
The socket's session lives on (the session is in Redis), so this part
opens a stream on the next replica with `session.resume` from the replay
cursor: the client gets exactly the events it missed, and carries on. It
tries again, backing off, until the reconnect deadline, then gives up with
`SessionUnavailable`. A stream lost before the session answered opens it
again elsewhere with the client's first command.

Commands keep the order the socket read them across streams: each stream
has its own sender, which ends with it, and a command leaves the pending
ones only once a stream took it. The connection's last command (its
goodbye) is said again on the next stream if a lost one took it away.
Whether it is streaming, failing over (and until when) or saying goodbye
is `failover_state`'s.

Its dependencies are passed in: the replicas (`Replicas`, gRPC channels in
the gateway, fakes in the tests) and where each event goes (`events`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Literal, Protocol

import grpc

from antiphon.common import tracing
from antiphon.common.event_kinds import EventKind, kind_of
from antiphon.gateway.connection.client_close import is_last
from antiphon.gateway.connection.failover_state import FailOverState, Retry
from antiphon.gateway.connection.pending_commands import PendingCommands
from antiphon.gateway.connection.replay_cursor import ReplayCursor
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import session_pb2_grpc

log = logging.getLogger(__name__)

# Events after which this socket's session stream is over for good.
TERMINAL: frozenset[EventKind] = frozenset(
    {"session_closed", "session_expired", "session_replaced", "resync_required"}
)
# Refusals of a resume that may pass if it is tried again shortly.
RETRYABLE_REFUSALS = frozenset({"server_error", "rate_limit_error"})
# A resume skips a replica that does not come up within this.
READY_WAIT_S = 1.0
# How one session stream ended: the session is over for this socket, the
# session ended the stream without a terminal event (a draining replica, or
# the client left), or the stream was lost.
Relayed = Literal["over", "ended", "lost"]


class SessionCall(Protocol):
    """One `SessionService.Connect` stream (a grpc.aio stream-stream call)."""

    async def write(self, request: spb.ClientCommand) -> None: ...

    async def done_writing(self) -> None: ...

    def __aiter__(self) -> AsyncIterator[spb.ServerEvent]: ...


class Replicas(Protocol):
    async def connect(self, attempt: int, *, resuming: bool) -> SessionCall:
        """A new stream for the `attempt`-th try (0 first); `resuming`: the
        previous one was lost."""
        ...


class GrpcReplicas:
    """The session replicas this gateway knows, tried in turn."""

    def __init__(self, channels: Sequence[grpc.aio.Channel]) -> None:
        self._channels = channels

    async def connect(self, attempt: int, *, resuming: bool) -> SessionCall:
        channel = self._channels[attempt % len(self._channels)]
        if resuming:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(channel.channel_ready(), READY_WAIT_S)
        stub = session_pb2_grpc.SessionServiceStub(channel)
        # The caller's span (the connection's) is the parent of the session's.
        call: SessionCall = stub.Connect(metadata=tracing.inject_metadata())
        return call


class SessionUnavailable(Exception):
    """No replica took the session back before the deadline. Told to the
    client as this error (`seq` 0: no session journaled it)."""

    type = "server_error"
    code = "session_unavailable"
    message = "the session service is unavailable"

    def __init__(self) -> None:
        super().__init__(self.message)


class FailOver:
    def __init__(
        self,
        replicas: Replicas,
        events: Callable[[spb.ServerEvent], None],
        metrics: GatewayMetrics,
        retry: Retry,
        *,
        max_pending_commands: int,
    ) -> None:
        self._replicas = replicas
        self._events = events
        self._metrics = metrics
        self._cursor = ReplayCursor()
        # Bounded: a client that sends faster than its session takes waits for
        # room, so TCP slows it (the socket is not read meanwhile).
        self._commands = PendingCommands(max_pending_commands)
        self._state = FailOverState(retry)

    async def put(self, command: spb.ClientCommand) -> None:
        """The next command, in the order the socket read it; waits while the
        stream is behind (or being resumed)."""
        await self._commands.put(command)

    async def say_last(self, goodbye: spb.ClientCommand, *, wait_s: float) -> None:
        """The connection's last command, sent after every command before it
        (the wait for room bounded: the stream may be lost meanwhile)."""
        self._state.say_goodbye(goodbye)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._commands.put(goodbye), wait_s)

    async def follow(self, first: spb.ClientCommand) -> None:
        """Stream the session's events to `events` until the session is over
        for this socket, or ends the stream after the goodbye; resume on
        another replica whenever the stream is lost."""
        loop = asyncio.get_running_loop()
        command, attempt = first, 0
        while True:
            resuming = self._state.failing_over is not None
            call = await self._replicas.connect(attempt, resuming=resuming)
            sender = asyncio.create_task(self._send(call, command))
            try:
                relayed, answered = await self._relay(call, failing_over=resuming)
            finally:
                # This stream's sender stops here: commands wait for the next one.
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
            goodbye = self._state.goodbye
            if relayed == "over" or (relayed == "ended" and goodbye is not None):
                return
            if answered:
                self._state.answered()
            if goodbye is not None and self._commands.empty():
                # The lost stream took the goodbye with it: the next one says it again.
                self._commands.put_nowait(goodbye)
            failing_over = self._state.lost(loop.time())
            if loop.time() > failing_over.deadline:
                raise SessionUnavailable()
            self._metrics.reconnects.inc()
            attempt += 1
            await asyncio.sleep(failing_over.backoff)
            # Resume from the last event this socket delivered; open again if
            # the session never answered (nothing was opened).
            resume = self._cursor.resume()
            if resume is not None:
                command = resume

    async def _send(self, call: SessionCall, first: spb.ClientCommand) -> None:
        """Write one stream's commands, `first` first, in the order the socket
        read them. Owned by the stream, so it ends with it: a command read
        after the stream was lost waits for the next stream, never for a dead one."""
        try:
            await call.write(first)
            while True:
                cmd = await self._commands.first()
                await call.write(cmd)
                self._commands.took()
                if is_last(cmd):
                    # Half-closed: the session ends the stream once it has heard.
                    await call.done_writing()
                    return
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            return  # the stream is over; `_relay` says how

    async def _relay(self, call: SessionCall, *, failing_over: bool) -> tuple[Relayed, bool]:
        """Forward one stream's events until the session is over for this
        socket, the session ends the stream, or the stream is lost; and
        whether the session answered on it.

        `failing_over`: the stream is a resume after a lost one. A refusal
        that may pass (no stage worker free yet, the replica busy) counts as
        lost, so the resume is tried again until the deadline, and the client
        never sees it."""
        answered = False
        try:
            async for ev in call:
                kind = kind_of(ev)
                if failing_over and kind == "error" and ev.seq == 0:
                    if ev.error.type in RETRYABLE_REFUSALS:
                        log.warning("fail-over resume refused", extra={"code": ev.error.code})
                        return "lost", answered
                answered = True
                self._cursor.note(ev, kind)
                self._events(ev)
                if kind in TERMINAL or (kind == "error" and ev.seq == 0):
                    return "over", answered
        except grpc.aio.AioRpcError as exc:
            log.warning("session stream lost", extra={"code": str(exc.code())})
            return "lost", answered
        # Ended without a terminal event: the replica is draining (or the
        # client left and the session detached).
        return "ended", answered
