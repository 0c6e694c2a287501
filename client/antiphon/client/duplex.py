"""`DuplexClient`: one Realtime session over one WebSocket, resumed across drops.

It speaks both dialects of `/v1/realtime`: OpenAI's (the session opens on
connect) and the duplex one (`?duplex=1`: the first `session.update` opens it,
events carry `server_event_seq`, and a dropped connection is resumed).

One reader task per connection reads every frame and hands it to the
consumer's side (session_events.py: deduplicated, stamped with the monotonic
clock, fanned out to responses, listeners and `events()` iterators).
When the connection drops without a close from either side, the reader
reconnects and sends `session.resume` with the token, the incarnation and
the last sequence number it holds: the server replays the rest, so a
consumer sees every event exactly once and one `Resumed` in between.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import time
from typing import Any, Self
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import ClientConnection

from antiphon.client import audio
from antiphon.client.connect import (
    DEFAULT_RECONNECT,
    DEFAULT_URL,
    Reconnect,
    ResumePoint,
    ask_resume,
    connect,
    is_duplex,
    with_query,
)
from antiphon.client.errors import ClientError, ProtocolError, Refused, SessionClosed
from antiphon.client.events import ErrorEvent, Event, Resumed, SessionEnded, SessionEvent
from antiphon.client.session_events import FrameLog, SessionEvents


class DuplexClient(SessionEvents):
    """An async context manager: entering opens the session, leaving closes it.

    `session` is the `session.update` body the session opens with (OpenAI's
    GA shape, e.g. `{"type": "realtime", "instructions": "..."}`); `api_key`
    goes out as `Authorization: Bearer`. `reconnect=None` turns resume off:
    a drop then ends the session for this client (`SessionClosed`).
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        api_key: str | None = None,
        session: dict[str, Any] | None = None,
        reconnect: Reconnect | None = DEFAULT_RECONNECT,
        heartbeat_s: float = 10.0,
        open_timeout_s: float = 10.0,
        on_frame: FrameLog | None = None,
    ) -> None:
        if urlsplit(url).path.endswith("/v1/duplex"):
            raise ClientError("the native dialect is not spoken here: use /v1/realtime?duplex=1")
        self.url = url
        self.duplex = is_duplex(url)
        self._api_key = api_key
        self._session_body = dict(session or {"type": "realtime"})
        self._reconnect = reconnect if self.duplex else None
        self._heartbeat_s = heartbeat_s
        self._open_timeout_s = open_timeout_s
        super().__init__(on_frame)
        self._ws: ClientConnection | None = None
        self._connected = asyncio.Event()
        self._closing = False
        self._reader: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self.resumes = 0

    # ------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> SessionEvent:
        """Connect and open the session; returns its `session.created`.
        Raises `ServerUnreachable` or `Refused`."""
        self._ws = await self._connect(self.url)
        events = self.subscribe()
        self._reader = asyncio.create_task(self._read(), name="antiphon-client-reader")
        try:
            if self.duplex:
                await self.send({"type": "session.update", "session": self._session_body})
            created = await self._first(events, "session.created")
            if self.duplex or self._session_body != {"type": "realtime"}:
                if not self.duplex:
                    await self.send({"type": "session.update", "session": self._session_body})
                await self._first(events, "session.updated")
        except BaseException:
            await self._shutdown()
            raise
        finally:
            self.unsubscribe(events)
        if self.duplex and self._heartbeat_s:
            self._heartbeat = asyncio.create_task(self._beat(), name="antiphon-client-heartbeat")
        assert isinstance(created, SessionEvent)
        return created

    async def _first(self, events: asyncio.Queue[Event | None], wanted: str) -> Event:
        """The next `wanted` on `events`; an `error` before it is a refusal."""
        async with asyncio.timeout(self._open_timeout_s):
            while True:
                event = await events.get()
                if event is None:
                    raise Refused(f"the server closed the connection: {self._ended}")
                if isinstance(event, ErrorEvent):
                    raise Refused(f"{event.code}: {event.message}", code=event.code)
                if event.type == wanted:
                    return event

    async def close(self) -> None:
        """End the session and the connection. Duplex: `session.close`, answered
        by `session.closed`; OpenAI's dialect: a clean close (1000) ends it."""
        if self._ws is None:
            return
        if self.duplex and not self._ended and self._connected.is_set():
            events = self.subscribe()
            with contextlib.suppress(ClientError, TimeoutError, websockets.ConnectionClosed):
                await self.send({"type": "session.close"})
                async with asyncio.timeout(5):
                    while (e := await events.get()) is not None and e.type != "session.closed":
                        pass
            self.unsubscribe(events)
        await self._shutdown()

    async def _shutdown(self) -> None:
        self._closing = True
        for task in (self._heartbeat, self._reader):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._ws is not None:
            await self._ws.close()
        self._end("closed by the client")

    # ------------------------------------------------------------ sending
    async def send(self, event: dict[str, Any]) -> str:
        """Send any client event (stamped with an `event_id` if it has none);
        returns its `event_id`. Waits out a reconnect in progress."""
        event = {"event_id": f"evt_c{next(self._ids)}", **event}
        frame = json.dumps(event)
        if self._on_frame is not None:
            self._on_frame(">", event)
        while True:
            if self._ended:
                raise SessionClosed(self._ended)
            if not self._connected.is_set():
                await self._until_connected()
            ws = self._ws
            assert ws is not None
            try:
                await ws.send(frame)
                return str(event["event_id"])
            except websockets.ConnectionClosed:
                # The frame never left: the reader resumes the session, and it
                # goes out on the new connection.
                if self._ws is ws:
                    self._connected.clear()

    async def _until_connected(self) -> None:
        connected = asyncio.ensure_future(self._connected.wait())
        over = asyncio.ensure_future(self._over.wait())
        try:
            await asyncio.wait((connected, over), return_when=asyncio.FIRST_COMPLETED)
        finally:
            connected.cancel()
            over.cancel()
        if self._ended:
            raise SessionClosed(self._ended)

    async def request(self, event: dict[str, Any], *answers: str, timeout: float = 30) -> Event:
        """Send `event` and wait for the first of `answers`; an `error` naming
        it raises `ProtocolError`."""
        events = self.subscribe()
        try:
            event_id = await self.send(event)
            async with asyncio.timeout(timeout):
                while (e := await events.get()) is not None:
                    if isinstance(e, ErrorEvent) and e.related_event_id == event_id:
                        raise ProtocolError(e.raw)
                    if e.type in answers:
                        return e
            raise SessionClosed(self._ended)
        finally:
            self.unsubscribe(events)

    async def update(self, **session: Any) -> SessionEvent:
        """`session.update`; returns `session.updated`."""
        answer = await self.request(
            {"type": "session.update", "session": {"type": "realtime", **session}},
            "session.updated",
        )
        assert isinstance(answer, SessionEvent)
        return answer

    async def append_audio(self, pcm16: bytes) -> None:
        """One `input_audio_buffer.append` of PCM16 at the session's input rate."""
        await self.send(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm16).decode()}
        )

    async def stream_audio(
        self, pcm16: bytes, *, chunk_ms: int = 200, realtime: bool = True
    ) -> float:
        """`pcm16` as one append per `chunk_ms`, paced on the wall clock as a
        microphone sends it (`realtime=False` sends as fast as it can).
        Returns the monotonic time the last append went out: the end of the
        user's speech on the client clock."""
        size = audio.chunk_bytes(chunk_ms, self.input_rate)
        tick = time.monotonic()
        sent_at = tick
        for start in range(0, len(pcm16), size):
            await self.append_audio(pcm16[start : start + size])
            sent_at = time.monotonic()
            if realtime:
                tick += chunk_ms / 1000
                await asyncio.sleep(max(0.0, tick - time.monotonic()))
        return sent_at

    async def commit(self) -> None:
        await self.send({"type": "input_audio_buffer.commit"})

    async def clear_input(self) -> None:
        await self.send({"type": "input_audio_buffer.clear"})

    async def say(self, text: str) -> None:
        """A user message of text, as if spoken: `conversation.item.create`."""
        await self.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": text}],
                },
            }
        )

    async def create_response(self, **response: Any) -> None:
        """`response.create`, with any of its options (`instructions`, ...)."""
        event: dict[str, Any] = {"type": "response.create"}
        if response:
            event["response"] = response
        await self.send(event)

    async def interrupt(self) -> bool:
        """Stop the response being said (`response.cancel`); False if none was."""
        if not self.active_response_id:
            return False
        await self.send({"type": "response.cancel", "response_id": self.active_response_id})
        return True

    async def ack_playback(
        self,
        response_id: str,
        played_ms: int,
        *,
        committed_ms: int | None = None,
        truncate: bool = False,
    ) -> None:
        """Duplex: how much of a response the user has heard (`playback.ack`).
        With `playback_commit_policy: ack_only`, history keeps only that."""
        if not self.duplex:
            raise ClientError("playback.ack is an event of the duplex dialect (?duplex=1)")
        await self.send(
            {
                "type": "playback.ack",
                "response_id": response_id,
                "played_ms": played_ms,
                "committed_ms": played_ms if committed_ms is None else committed_ms,
                "truncate": truncate,
            }
        )

    # ------------------------------------------------------------ the reader
    async def _connect(self, url: str) -> ClientConnection:
        return await connect(url, api_key=self._api_key, open_timeout_s=self._open_timeout_s)

    async def _read(self) -> None:
        self._connected.set()
        while True:
            assert self._ws is not None
            try:
                async for frame in self._ws:
                    self._receive(json.loads(frame))
                    if self._ended:
                        return
            except websockets.ConnectionClosed:
                pass
            if self._closing or self._ended:
                break
            self._connected.clear()
            if not await self._resume():
                break
        if not self._closing:
            self._end("connection lost")

    async def _resume(self) -> bool:
        """Reconnect and `session.resume`; False when the session cannot come back."""
        if self._reconnect is None or not self.resume_token:
            return False
        url = with_query(self.url, duplex="1", autostart="0")
        for delay in self._reconnect.delays():
            await asyncio.sleep(delay)
            try:
                ws = await self._connect(url)
            except ClientError:
                continue
            at = ResumePoint(self.session_id, self.incarnation, self.resume_token, self.last_seq)
            answer = await ask_resume(ws, at, self._open_timeout_s)
            if answer is None:
                await ws.close()
                continue  # refused for now (no worker room): the token still works
            if isinstance(answer, ErrorEvent | SessionEnded):
                await ws.close()
                why = answer.code if isinstance(answer, ErrorEvent) else answer.reason
                self._end(f"resume refused: {why}")
                return False
            self._ws = ws
            self.resumes += 1
            self._deliver(answer)
            self._deliver(Resumed({"type": "client.resumed"}, time.monotonic()))
            self._connected.set()
            return True
        return False

    async def _beat(self) -> None:
        """Duplex: keep the lease warm and let the server trim what we have read."""
        while True:
            await asyncio.sleep(self._heartbeat_s)
            with contextlib.suppress(ClientError):
                await self.send({"type": "session.heartbeat"})
                await self.send({"type": "session.event_ack", "server_event_seq": self.last_seq})
