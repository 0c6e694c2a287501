"""`DuplexClient`: one Realtime session over one WebSocket, resumed across drops.

It speaks both dialects of `/v1/realtime`: OpenAI's (the session opens on
connect) and the duplex one (`?duplex=1`: the first `session.update` opens it,
events carry `server_event_seq`, and a dropped connection is resumed).

One reader task per connection reads every frame, stamps it with the
monotonic clock, drops what a replay repeats, and hands it to the response
demultiplexer, to the listeners and to every open `events()` iterator.
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
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import websockets
from websockets.asyncio.client import ClientConnection

from antiphon.client import audio
from antiphon.client.errors import (
    ClientError,
    ProtocolError,
    Refused,
    ServerUnreachable,
    SessionClosed,
)
from antiphon.client.events import (
    ErrorEvent,
    Event,
    ResponseCreated,
    Resumed,
    SessionEnded,
    SessionEvent,
    parse,
)
from antiphon.client.responses import ResponseHandle

DEFAULT_URL = "ws://127.0.0.1:8000/v1/realtime?duplex=1"
# Frames the client logs in both directions (`on_frame`): "<" in, ">" out.
FrameLog = Callable[[str, dict[str, Any]], None]
Listener = Callable[[Event], None]
# Attachment-scoped events: their `server_event_seq` is a cursor, not a journal position.
_CURSOR_EVENTS = frozenset({"session.resumed", "session.replaced", "session.resync_required"})
T = TypeVar("T")


@dataclass(frozen=True)
class Reconnect:
    """How a dropped connection is retried: `attempts` tries, with jittered
    exponential backoff from `first_delay_s` up to `max_delay_s`."""

    attempts: int = 6
    first_delay_s: float = 0.25
    max_delay_s: float = 4.0

    def delays(self) -> list[float]:
        return [
            min(self.max_delay_s, self.first_delay_s * 2**i) * random.uniform(0.5, 1.0)
            for i in range(self.attempts)
        ]


def is_duplex(url: str) -> bool:
    parts = urlsplit(url)
    flag = dict(parse_qsl(parts.query)).get("duplex", "")
    return flag.lower() in ("1", "true", "yes")


def with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query)) | params
    return urlunsplit(parts._replace(query=urlencode(query)))


class DuplexClient:
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
        reconnect: Reconnect | None = Reconnect(),
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
        self._on_frame = on_frame
        self._ws: ClientConnection | None = None
        self._connected = asyncio.Event()
        self._closing = False
        self._ended: str = ""  # why the session is over, once it is
        self._over = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._streams: list[asyncio.Queue[Event | None]] = []
        self._listeners: list[Listener] = []
        self._responses: dict[str, ResponseHandle] = {}
        self._new_responses: list[asyncio.Queue[ResponseHandle | None]] = []
        self._ids = itertools.count(1)
        # What the session is, as the server last said it.
        self.session: dict[str, Any] = {}
        self.session_id = ""
        self.resume_token = ""
        self.incarnation = 0
        self.last_seq = 0
        self.resumes = 0
        self.active_response_id = ""

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

    # ------------------------------------------------------------ receiving
    def subscribe(self) -> asyncio.Queue[Event | None]:
        """A queue of every event from now on (None once the session is over)."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        if self._ended:
            queue.put_nowait(None)
        self._streams.append(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event | None]) -> None:
        _discard(self._streams, queue)

    def add_listener(self, listener: Listener) -> None:
        """`listener(event)` is called for every event, in the reader, as it arrives."""
        self._listeners.append(listener)

    def events(self) -> Feed[Event]:
        """Every server event from now on (from this call, not from the first
        `anext`), until the session is over."""
        queue = self.subscribe()
        return Feed(queue, lambda: self.unsubscribe(queue))

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.events()

    async def wait_for(self, *types: str, timeout: float = 60) -> Event:
        """The next event of one of `types`; an `error` on the way raises `ProtocolError`."""
        async with asyncio.timeout(timeout), self.events() as events:
            async for event in events:
                if event.type in types:
                    return event
                if isinstance(event, ErrorEvent):
                    raise ProtocolError(event.raw)
        raise SessionClosed(self._ended)

    def responses(self) -> Feed[ResponseHandle]:
        """Each response created from now on (from this call), as it is created."""
        queue: asyncio.Queue[ResponseHandle | None] = asyncio.Queue()
        if self._ended:
            queue.put_nowait(None)
        self._new_responses.append(queue)
        return Feed(queue, lambda: _discard(self._new_responses, queue))

    async def next_response(self, timeout: float = 120) -> ResponseHandle:
        """The next response created, read to its end."""
        async with asyncio.timeout(timeout), self.responses() as responses:
            async for handle in responses:
                await handle.wait()
                return handle
        raise SessionClosed(self._ended)

    @property
    def input_rate(self) -> int:
        return _rate(self.session, "input")

    @property
    def output_rate(self) -> int:
        return _rate(self.session, "output")

    # ------------------------------------------------------------ the reader
    async def _connect(self, url: str) -> ClientConnection:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        try:
            return await websockets.connect(
                url,
                additional_headers=headers,
                max_size=None,
                open_timeout=self._open_timeout_s,
                ping_interval=None,
                # No permessage-deflate (websockets offers it by default, uvicorn
                # accepts): the traffic is base64 PCM, which barely compresses, and
                # both ends would pay zlib on every frame. At 200 sessions in one
                # process it doubled the client's CPU and its commit -> first audio.
                compression=None,
            )
        except websockets.InvalidStatus as exc:
            status = exc.response.status_code
            body = exc.response.body.decode(errors="replace") if exc.response.body else ""
            raise Refused(f"HTTP {status} from {url}: {body}".strip(), status=status) from exc
        except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
            raise ServerUnreachable(url, exc) from exc

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

    def _receive(self, raw: dict[str, Any]) -> None:
        event = parse(raw, time.monotonic())
        if self._on_frame is not None:
            self._on_frame("<", raw)
        seq = event.seq
        # Only journaled events can come twice. An error no session journaled
        # carries seq 0, and the attachment-scoped events carry the cursor they
        # resumed from (a gateway's own fail-over forwards its `session.resumed`,
        # with the rotated token): neither is a replay, both must get through.
        if seq and event.type not in _CURSOR_EVENTS:
            if seq <= self.last_seq:
                return  # replayed twice: the consumer has it already
            self.last_seq = seq
        self._deliver(event)
        if isinstance(event, SessionEnded):
            self._end(event.reason)

    def _deliver(self, event: Event) -> None:
        if isinstance(event, SessionEvent):
            self.session = event.session or self.session
            self.session_id = event.session_id or self.session_id
            self.resume_token = str(event.raw.get("resume_token") or self.resume_token)
            self.incarnation = int(event.raw.get("incarnation") or self.incarnation)
        self._route(event)
        for listener in self._listeners:
            listener(event)
        for queue in self._streams:
            queue.put_nowait(event)

    def _route(self, event: Event) -> None:
        """Hand a response's events to its handle (a new one on `response.created`)."""
        rid = event.response_id
        if isinstance(event, ResponseCreated):
            created = ResponseHandle(rid)
            self._responses[rid] = created
            self.active_response_id = rid
            for queue in self._new_responses:
                queue.put_nowait(created)
        handle = self._responses.get(rid) if rid else None
        if handle is None:
            return
        handle.feed(event)
        if handle.finished:
            del self._responses[rid]
            if self.active_response_id == rid:
                self.active_response_id = ""

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
            answer = await self._ask_resume(ws)
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

    async def _ask_resume(self, ws: ClientConnection) -> Event | None:
        """`session.resumed`, an `error` that is final, or None to try again."""
        await ws.send(
            json.dumps(
                {
                    "type": "session.resume",
                    "session_id": self.session_id,
                    "incarnation": self.incarnation,
                    "resume_token": self.resume_token,
                    "last_received_server_event_seq": self.last_seq,
                }
            )
        )
        try:
            async with asyncio.timeout(self._open_timeout_s):
                while True:
                    event = parse(json.loads(await ws.recv()), time.monotonic())
                    if event.type == "session.resumed" or isinstance(event, SessionEnded):
                        return event
                    if isinstance(event, ErrorEvent):
                        # No worker room is for now; anything else is final.
                        full = event.raw.get("error", {}).get("type") == "rate_limit_error"
                        return None if full else event
        except (TimeoutError, websockets.ConnectionClosed):
            return None

    async def _beat(self) -> None:
        """Duplex: keep the lease warm and let the server trim what we have read."""
        while True:
            await asyncio.sleep(self._heartbeat_s)
            with contextlib.suppress(ClientError):
                await self.send({"type": "session.heartbeat"})
                await self.send({"type": "session.event_ack", "server_event_seq": self.last_seq})

    def _end(self, reason: str) -> None:
        if self._ended:
            return
        self._ended = reason
        self._over.set()
        for queue in self._streams:
            queue.put_nowait(None)
        for waiting in self._new_responses:
            waiting.put_nowait(None)
        for handle in self._responses.values():
            handle.abandon()
        self._responses.clear()

    @property
    def ended(self) -> str:
        """Why the session is over; "" while it is not."""
        return self._ended


class Feed(Generic[T]):
    """An async iterator over what a client hands out, subscribed when made
    (so nothing between the call and the first `anext` is missed); `aclose`
    or leaving `async with` unsubscribes."""

    def __init__(self, queue: asyncio.Queue[T | None], unsubscribe: Callable[[], None]) -> None:
        self._queue = queue
        self._unsubscribe = unsubscribe

    def __aiter__(self) -> Feed[T]:
        return self

    async def __anext__(self) -> T:
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)  # over for every later call too
            await self.aclose()
            raise StopAsyncIteration
        return item

    async def aclose(self) -> None:
        self._unsubscribe()

    async def __aenter__(self) -> Feed[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _discard(items: list[Any], item: Any) -> None:
    with contextlib.suppress(ValueError):
        items.remove(item)


def _rate(session: dict[str, Any], direction: str) -> int:
    fmt = ((session.get("audio") or {}).get(direction) or {}).get("format") or {}
    rate = fmt.get("rate") if isinstance(fmt, dict) else None
    return int(rate) if rate else audio.WIRE_RATE
