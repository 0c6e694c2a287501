"""One Realtime session of the load generator: paced audio in, timed events out.

Every received event is stamped with the client's monotonic clock the moment
its frame is read, by one reader task per socket; the driver sends paced
`input_audio_buffer.append` events (one per 200 ms of audio, in real time),
commits, asks for a response and waits for `response.done`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import websockets

CHUNK_MS = 200
CHUNK_BYTES = 24000 * 2 * CHUNK_MS // 1000  # PCM16 mono 24 kHz
AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")
MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
SERVER_VAD = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}

Event = dict[str, Any]


def _quiet(fut: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen: a waiter that gave up must not log it."""
    if not fut.cancelled():
        fut.exception()


def append_messages(pcm16: bytes) -> list[str]:
    """The `input_audio_buffer.append` frames of `pcm16`, one per 200 ms, ready to send."""
    return [
        json.dumps(
            {
                "type": "input_audio_buffer.append",
                "audio": base64.b64encode(pcm16[i : i + CHUNK_BYTES]).decode(),
            }
        )
        for i in range(0, len(pcm16), CHUNK_BYTES)
    ]


COMMIT = json.dumps({"type": "input_audio_buffer.commit"})
CREATE = json.dumps({"type": "response.create"})
HEARTBEAT = json.dumps({"type": "session.heartbeat"})
CLOSE = json.dumps({"type": "session.close"})


class SessionError(Exception):
    """The session cannot go on (socket closed, refused, timed out); `code` says why."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class TurnResult:
    session: int
    turn: int
    status: str = "timeout"
    reason: str = ""
    # Client clock, milliseconds after the commit was sent.
    first_audio_ms: float | None = None
    done_ms: float | None = None
    # Largest gap between consecutive audio deltas of the response.
    audio_gap_max_ms: float | None = None
    audio_deltas: int = 0
    # Gaps between consecutive server events from the commit to `response.done`.
    event_gaps_ms: list[float] = field(default_factory=list)
    # `session.heartbeat` -> `session.heartbeat_ack`, sent mid-turn.
    heartbeat_ms: float | None = None
    # How late the paced appends went out, worst case (client-side lag).
    send_late_max_ms: float = 0.0


@dataclass
class _Response:
    """What the reader has seen of the response being waited for."""

    t_commit: float
    t_prev: float
    t_done: float | None = None
    first_audio: float | None = None
    last_audio: float | None = None
    gap_max: float = 0.0
    deltas: int = 0
    gaps: list[float] = field(default_factory=list)
    response_id: str = ""
    done: asyncio.Future[Event] | None = None


class LoadSession:
    """One socket and its reader; the driver coroutines run one at a time on it."""

    def __init__(self, index: int, ws: websockets.ClientConnection) -> None:
        self.index = index
        self.ws = ws
        self.errors: Counter[str] = Counter()
        self.session_id = ""
        self._loop = asyncio.get_running_loop()
        self._waiting: dict[str, asyncio.Future[tuple[float, Event]]] = {}
        self._response: _Response | None = None
        self._reader = asyncio.create_task(self._read())
        # Every audio delta as (client time, response id): the barge-in probe reads them.
        self.audio_log: list[tuple[float, str]] = []
        self.closed_code = ""

    @classmethod
    async def connect(cls, index: int, url: str, deflate: bool, timeout_s: float) -> LoadSession:
        try:
            ws = await asyncio.wait_for(
                websockets.connect(
                    url,
                    max_size=None,
                    ping_interval=None,
                    compression="deflate" if deflate else None,
                    open_timeout=timeout_s,
                ),
                timeout_s,
            )
        except (OSError, TimeoutError, websockets.InvalidHandshake) as exc:
            raise SessionError(f"connect_{type(exc).__name__}") from exc
        return cls(index, ws)

    # ------------------------------------------------------------ reader
    async def _read(self) -> None:
        try:
            async for raw in self.ws:
                self._on_event(time.monotonic(), json.loads(raw))
        except websockets.ConnectionClosed:
            pass
        except Exception as exc:
            self.closed_code = f"reader_{type(exc).__name__}"
        finally:
            code = self.ws.close_code
            self.closed_code = self.closed_code or (f"ws_closed_{code}" if code else "ws_closed")
            fail = SessionError(self.closed_code)
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(fail)
            r = self._response
            if r is not None and r.done is not None and not r.done.done():
                r.done.set_exception(fail)

    def _on_event(self, t: float, ev: Event) -> None:
        kind = ev.get("type", "")
        if kind == "error":
            self.errors[ev.get("error", {}).get("code") or "error"] += 1
        r = self._response
        if r is not None:
            r.gaps.append((t - r.t_prev) * 1000)
            r.t_prev = t
            if kind == "response.created":
                r.response_id = ev["response"]["id"]
            elif kind in AUDIO_DELTAS:
                if r.last_audio is not None:
                    r.gap_max = max(r.gap_max, (t - r.last_audio) * 1000)
                else:
                    r.first_audio = t
                r.last_audio = t
                r.deltas += 1
            elif kind == "response.done" and r.done is not None and not r.done.done():
                r.t_done = t
                self._response = None  # later events belong to no response
                r.done.set_result(ev)
        if kind in AUDIO_DELTAS:
            self.audio_log.append((t, ev.get("response_id", "")))
        fut = self._waiting.pop(kind, None)
        if fut is not None and not fut.done():
            fut.set_result((t, ev))

    def expect(self, *kinds: str) -> asyncio.Future[tuple[float, Event]]:
        """A future for the next event of any of `kinds` (registered before sending)."""
        fut: asyncio.Future[tuple[float, Event]] = self._loop.create_future()
        fut.add_done_callback(_quiet)
        for kind in kinds:
            self._waiting[kind] = fut
        return fut

    async def wait(self, fut: asyncio.Future[tuple[float, Event]], timeout_s: float) -> Event:
        try:
            return (await asyncio.wait_for(fut, timeout_s))[1]
        except TimeoutError as exc:
            raise SessionError("timeout") from exc

    # ------------------------------------------------------------ driver
    async def open(self, session: dict[str, Any], timeout_s: float) -> None:
        """`session.update` -> `session.created` + `session.updated`; a refusal raises its code."""
        created = self.expect("session.created", "error")
        updated = self.expect("session.updated")
        await self.ws.send(json.dumps({"type": "session.update", "session": session}))
        ev = await self.wait(created, timeout_s)
        if ev["type"] == "error":
            raise SessionError(ev["error"].get("code") or "error")
        self.session_id = ev["session"]["id"]
        await self.wait(updated, timeout_s)

    async def stream(
        self, frames: Sequence[str], start_at: float, heartbeat_at: int = -1
    ) -> tuple[float, asyncio.Future[tuple[float, Event]] | None, float]:
        """Send `frames` paced in real time from `start_at` (monotonic).

        Returns (worst send lateness in ms, the heartbeat's future, when it was sent)."""
        late_max = 0.0
        hb: asyncio.Future[tuple[float, Event]] | None = None
        t_hb = 0.0
        for i, frame in enumerate(frames):
            due = start_at + i * CHUNK_MS / 1000
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                late_max = max(late_max, -delay * 1000)
            await self.ws.send(frame)
            if i == heartbeat_at:
                hb = self.expect("session.heartbeat_ack")
                t_hb = time.monotonic()
                await self.ws.send(HEARTBEAT)
        return late_max, hb, t_hb

    async def turn(
        self, turn: int, frames: Sequence[str], start_at: float, timeout_s: float
    ) -> TurnResult:
        """One manual-lane turn: paced audio, commit + response.create, to `response.done`."""
        result = TurnResult(self.index, turn)
        late, hb, t_hb = await self.stream(frames, start_at, heartbeat_at=len(frames) // 2)
        result.send_late_max_ms = round(late, 1)
        t_commit = time.monotonic()
        r = _Response(t_commit=t_commit, t_prev=t_commit, done=self._loop.create_future())
        assert r.done is not None
        r.done.add_done_callback(_quiet)
        self._response = r
        await self.ws.send(COMMIT)
        await self.ws.send(CREATE)
        try:
            done = (await asyncio.wait_for(r.done, timeout_s))["response"]
        except TimeoutError:
            result.status = "timeout"
            done = None
        finally:
            self._response = None
        if done is not None:
            result.status = done.get("status", "")
            result.reason = (done.get("status_details") or {}).get("reason") or ""
            result.done_ms = round(((r.t_done or r.t_prev) - t_commit) * 1000, 2)
        if r.first_audio is not None:
            result.first_audio_ms = round((r.first_audio - t_commit) * 1000, 2)
            # A gap needs two deltas: a one-chunk answer has none.
            result.audio_gap_max_ms = round(r.gap_max, 2) if r.deltas > 1 else None
        result.audio_deltas = r.deltas
        result.event_gaps_ms = [round(g, 3) for g in r.gaps]
        if hb is not None:
            try:
                t_ack, _ = await asyncio.wait_for(hb, timeout_s)
                result.heartbeat_ms = round((t_ack - t_hb) * 1000, 2)
            except (TimeoutError, SessionError):
                self.errors["heartbeat_lost"] += 1
        return result

    async def close(self, timeout_s: float = 10.0) -> None:
        """`session.close` (frees the admission slot at once), then the socket."""
        try:
            if not self._reader.done():
                closed = self.expect("session.closed")
                await self.ws.send(CLOSE)
                await asyncio.wait_for(closed, timeout_s)
        except (TimeoutError, SessionError, websockets.ConnectionClosed):
            pass
        finally:
            await self.ws.close()
            self._reader.cancel()


class Mic:
    """A live microphone on the session: one frame every 200 ms, silence unless speaking."""

    def __init__(self, session: LoadSession, silence: str) -> None:
        self._session = session
        self._silence = silence
        self._queue: list[str] = []
        self._onset: asyncio.Future[float] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def say(self, frames: Sequence[str]) -> asyncio.Future[float]:
        """Speak `frames` next; the future gets the client time the first one was sent."""
        self._queue = list(frames)
        self._onset = asyncio.get_running_loop().create_future()
        return self._onset

    async def _run(self) -> None:
        t0 = time.monotonic()
        i = 0
        while True:
            delay = t0 + i * CHUNK_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            frame = self._queue.pop(0) if self._queue else self._silence
            onset = self._onset if frame is not self._silence else None
            await self._session.ws.send(frame)
            if onset is not None and not onset.done():
                onset.set_result(time.monotonic())
            i += 1

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, websockets.ConnectionClosed):
                pass


async def barge_in_trial(
    session: LoadSession,
    question: Sequence[str],
    barge: Sequence[str],
    silence: str,
    timeout_s: float,
) -> dict[str, Any]:
    """`server_vad` lane: ask, and speak again as soon as the answer's first audio arrives.

    Measured from the moment the first frame of the barge-in speech is sent
    (its leading silence trimmed, so that is the speech onset) to the
    response's `response.done` and to its last audio delta.
    """
    mic = Mic(session, silence)
    created = session.expect("response.created")
    mic.say(question)
    mic.start()
    try:
        response_id = (await session.wait(created, timeout_s))["response"]["id"]
        done = session.expect("response.done")
        await session.wait(session.expect(*AUDIO_DELTAS), timeout_s)
        t_onset = await mic.say(barge)
        try:
            t_done, ev = await asyncio.wait_for(done, 30.0)
        except TimeoutError:
            return {"status": "timeout", "note": "no response.done within 30 s of the barge-in"}
    finally:
        await mic.stop()
    audio = [t for t, rid in session.audio_log if rid == response_id]
    after = [t for t in audio if t > t_onset]
    response = ev["response"]
    return {
        "status": response.get("status", ""),
        "reason": (response.get("status_details") or {}).get("reason") or "",
        # Speech onset sent -> response.done (whatever its status).
        "onset_to_done_ms": round((t_done - t_onset) * 1000, 1),
        # Speech onset sent -> the response's last audio delta (0: none after the onset).
        "onset_to_last_audio_ms": round((max(after) - t_onset) * 1000, 1) if after else 0.0,
        "audio_deltas_after_onset": len(after),
        "audio_deltas": len(audio),
    }
