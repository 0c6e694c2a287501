"""One Realtime session of the load generator: paced audio in, timed events out.

Every received event is stamped with the client's monotonic clock the moment
its frame is read, by one reader task per socket. In the manual lane the
driver sends paced `input_audio_buffer.append` events (one per 200 ms of
audio, in real time), commits, asks for a response and waits for
`response.done`. In the `server_vad` and native lanes a `Mic` streams like a
live microphone: one 200 ms append every 200 ms on an absolute wall-clock
schedule, the question and then silence, without stopping; the server alone
decides when the user has finished.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import websockets

INPUT_RATE = 24000  # the session's input rate: OpenAI's default, PCM16 mono
CHUNK_MS = 200
CHUNK_BYTES = INPUT_RATE * 2 * CHUNK_MS // 1000
AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")
TRANSCRIPT = "conversation.item.input_audio_transcription.completed"
ANSWER = ("response.output_audio_transcript.done", "response.audio_transcript.done")
# The events a turn reads back after the fact (with their client receipt time).
LOGGED = frozenset(
    {
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        TRANSCRIPT,
        *ANSWER,
        "response.created",
        "response.done",
    }
)
MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
SERVER_VAD = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}}
# The native duplex lane (docs/realtime.md): the model listens while the user
# speaks and answers speech followed by silence; no commit, no server VAD turns.
NATIVE = {
    "type": "realtime",
    "audio": {"input": {"turn_detection": None}},
    "extra_body": {"native_duplex": True},
}
LANES: dict[str, dict[str, Any]] = {"manual": MANUAL, "server_vad": SERVER_VAD, "native": NATIVE}

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


@dataclass(frozen=True)
class Question:
    """A spoken question as append frames; `speech_end` indexes the last frame holding speech."""

    text: str
    frames: list[str]
    speech_end: int

    @property
    def audio_ms(self) -> int:
        return len(self.frames) * CHUNK_MS


class SessionError(Exception):
    """The session cannot go on (socket closed, refused, timed out); `code` says why."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class TurnResult:
    session: int
    turn: int
    lane: str = "manual"
    status: str = "timeout"
    reason: str = ""
    # Client clock, milliseconds after the commit was sent (manual lane only).
    first_audio_ms: float | None = None
    done_ms: float | None = None
    # Client clock, milliseconds after the send of the last append holding speech.
    eos_first_audio_ms: float | None = None
    eos_done_ms: float | None = None
    # ... to the server's own turn events (server_vad and native lanes).
    eos_speech_stopped_ms: float | None = None
    eos_committed_ms: float | None = None
    eos_created_ms: float | None = None
    # What the server heard: None when no transcription event came at all.
    transcript: str | None = None
    # What it answered (the spoken answer's transcript).
    answer: str = ""
    # `response.created` events during the turn (more than one: the turn was split).
    responses: int = 0
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
    created: asyncio.Future[float] | None = None
    # Answer audio received, in ms of PCM16 at the output rate (24 kHz by default).
    audio_ms: float = 0.0


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
        # The turn events of `LOGGED`, as (client time, type, event).
        self.log: list[tuple[float, str, Event]] = []
        self._logged = asyncio.Event()
        self.closed_code = ""
        # The session the server settled on (its `session.updated`).
        self.session: dict[str, Any] = {}

    @classmethod
    async def connect(cls, index: int, url: str, deflate: bool, timeout_s: float) -> Self:
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
            self._logged.set()

    def _on_event(self, t: float, ev: Event) -> None:
        kind = ev.get("type", "")
        if kind == "error":
            self.errors[ev.get("error", {}).get("code") or "error"] += 1
        r = self._response
        if r is not None:
            r.gaps.append((t - r.t_prev) * 1000)
            r.t_prev = t
            if kind == "response.created":
                r.response_id = r.response_id or ev["response"]["id"]
                if r.created is not None and not r.created.done():
                    r.created.set_result(t)
            elif kind in AUDIO_DELTAS:
                if r.last_audio is not None:
                    r.gap_max = max(r.gap_max, (t - r.last_audio) * 1000)
                else:
                    r.first_audio = t
                r.last_audio = t
                r.deltas += 1
                audio = ev.get("delta") or ev.get("audio") or ""
                r.audio_ms += len(audio) * 3 / 4 / (2 * INPUT_RATE / 1000)
            elif kind == "response.done" and r.done is not None and not r.done.done():
                r.t_done = t
                self._response = None  # later events belong to no response
                r.done.set_result(ev)
        if kind in AUDIO_DELTAS:
            self.audio_log.append((t, ev.get("response_id", "")))
        elif kind in LOGGED:
            self.log.append((t, kind, ev))
            self._logged.set()
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
        self.session = (await self.wait(updated, timeout_s)).get("session") or {}

    async def stream(
        self, frames: Sequence[str], start_at: float, heartbeat_at: int = -1, mark_at: int = -1
    ) -> tuple[float, asyncio.Future[tuple[float, Event]] | None, float, float]:
        """Send `frames` paced in real time from `start_at` (monotonic).

        Returns (worst send lateness in ms, the heartbeat's future, when it was
        sent, when frame `mark_at` was sent)."""
        late_max = 0.0
        hb: asyncio.Future[tuple[float, Event]] | None = None
        t_hb = 0.0
        t_mark = 0.0
        for i, frame in enumerate(frames):
            due = start_at + i * CHUNK_MS / 1000
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                late_max = max(late_max, -delay * 1000)
            await self.ws.send(frame)
            if i == mark_at:
                t_mark = time.monotonic()
            if i == heartbeat_at:
                hb = self.expect("session.heartbeat_ack")
                t_hb = time.monotonic()
                await self.ws.send(HEARTBEAT)
        return late_max, hb, t_hb, t_mark

    async def transcript(self, since: int, grace_s: float) -> str | None:
        """The user transcripts logged from `self.log[since]` on, joined; waits up to
        `grace_s` for one to come. None: the server sent no transcription at all."""
        deadline = time.monotonic() + grace_s
        while True:
            heard = [
                ev.get("transcript") or "" for _t, k, ev in self.log[since:] if k == TRANSCRIPT
            ]
            left = deadline - time.monotonic()
            if heard or left <= 0 or self._reader.done():
                return " ".join(h.strip() for h in heard).strip() if heard else None
            self._logged.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._logged.wait(), left)

    def _after(self, since: int, t0: float, kind: str) -> float | None:
        """Milliseconds from `t0` to the first `kind` logged from `self.log[since]` after `t0`."""
        for t, k, _ev in self.log[since:]:
            if k == kind and t >= t0:
                return round((t - t0) * 1000, 2)
        return None

    def _created_since(self, since: int) -> int:
        return sum(1 for _t, k, _ev in self.log[since:] if k == "response.created")

    def _answer_since(self, since: int) -> str:
        said = [ev.get("transcript") or "" for _t, k, ev in self.log[since:] if k in ANSWER]
        return " ".join(a.strip() for a in said).strip()

    async def turn(
        self,
        turn: int,
        question: Question,
        start_at: float,
        timeout_s: float,
        grace_s: float = 10.0,
    ) -> TurnResult:
        """One manual-lane turn: paced audio, commit + response.create, to `response.done`."""
        frames = question.frames
        result = TurnResult(self.index, turn)
        since = len(self.log)
        late, hb, t_hb, t_eos = await self.stream(
            frames, start_at, heartbeat_at=len(frames) // 2, mark_at=question.speech_end
        )
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
            result.eos_done_ms = round(((r.t_done or r.t_prev) - t_eos) * 1000, 2)
        if r.first_audio is not None:
            result.first_audio_ms = round((r.first_audio - t_commit) * 1000, 2)
            result.eos_first_audio_ms = round((r.first_audio - t_eos) * 1000, 2)
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
        result.transcript = await self.transcript(since, grace_s if done is not None else 0.0)
        result.responses = self._created_since(since)
        result.answer = self._answer_since(since)
        return result

    async def live_turn(
        self,
        turn: int,
        lane: str,
        mic: Mic,
        question: Question,
        timeout_s: float,
        no_response_s: float,
        grace_s: float = 10.0,
    ) -> TurnResult:
        """One `server_vad` or native turn: the live `mic` says `question` and goes on
        with silence; no commit, no `response.create`. Waits for the server's
        answer to `response.done` (a `no_response` turn when none starts within
        `no_response_s` of the end of speech), then for it to play out in real
        time, as a listener would, before the next question."""
        result = TurnResult(self.index, turn, lane=lane)
        since = len(self.log)
        r = _Response(t_commit=0.0, t_prev=0.0)

        def at_end_of_speech(t: float) -> None:
            # Called by the mic right after the last speech frame is sent, before
            # any other task runs: no event of the answer can be missed.
            r.t_commit = r.t_prev = t
            r.done = self._loop.create_future()
            r.created = self._loop.create_future()
            r.done.add_done_callback(_quiet)
            r.created.add_done_callback(_quiet)
            self._response = r

        said = mic.say(question.frames, speech_end=question.speech_end, on_end=at_end_of_speech)
        said.heartbeat_at = len(question.frames) // 2
        t_eos = await asyncio.wait_for(said.end, question.audio_ms / 1000 + timeout_s)
        assert r.done is not None and r.created is not None
        done: Event | None = None
        try:
            either: set[asyncio.Future[Any]] = {r.created, r.done}
            started, _ = await asyncio.wait(either, timeout=no_response_s)
            if not started:
                result.status = "no_response"
            else:
                done = (await asyncio.wait_for(r.done, timeout_s))["response"]
        except TimeoutError:
            result.status = "timeout"
        finally:
            self._response = None
        for fut in (r.created, r.done):
            if fut.done():
                fut.result()  # a closed socket raises its SessionError here
        result.send_late_max_ms = round(said.late_max_ms, 1)
        if done is not None:
            result.status = done.get("status", "")
            result.reason = (done.get("status_details") or {}).get("reason") or ""
            result.eos_done_ms = round(((r.t_done or r.t_prev) - t_eos) * 1000, 2)
        if r.first_audio is not None:
            result.eos_first_audio_ms = round((r.first_audio - t_eos) * 1000, 2)
            result.audio_gap_max_ms = round(r.gap_max, 2) if r.deltas > 1 else None
        result.audio_deltas = r.deltas
        result.event_gaps_ms = [round(g, 3) for g in r.gaps]
        result.eos_speech_stopped_ms = self._after(
            since, t_eos, "input_audio_buffer.speech_stopped"
        )
        result.eos_committed_ms = self._after(since, t_eos, "input_audio_buffer.committed")
        result.eos_created_ms = self._after(since, t_eos, "response.created")
        if said.heartbeat is not None:
            try:
                t_ack, _ = await asyncio.wait_for(said.heartbeat, timeout_s)
                result.heartbeat_ms = round((t_ack - said.t_heartbeat) * 1000, 2)
            except (TimeoutError, SessionError):
                self.errors["heartbeat_lost"] += 1
        result.transcript = await self.transcript(since, grace_s if done is not None else 0.0)
        result.responses = self._created_since(since)
        result.answer = self._answer_since(since)
        if r.first_audio is not None:
            # The listener hears the answer out before speaking again.
            played = r.first_audio + r.audio_ms / 1000 - time.monotonic()
            if played > 0:
                await asyncio.sleep(played)
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


class Said:
    """One utterance given to a `Mic`: when its frames went out (client clock)."""

    def __init__(
        self,
        frames: Sequence[str],
        speech_end: int,
        on_end: Callable[[float], None] | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        self.frames = list(frames)
        self.speech_end = speech_end if speech_end >= 0 else len(self.frames) - 1
        self.on_end = on_end
        self.sent = 0
        # The send time of the first frame, and of the last one holding speech.
        self.onset: asyncio.Future[float] = loop.create_future()
        self.end: asyncio.Future[float] = loop.create_future()
        for fut in (self.onset, self.end):
            fut.add_done_callback(_quiet)
        # A `session.heartbeat` goes out after frame `heartbeat_at` (-1: none).
        self.heartbeat_at = -1
        self.heartbeat: asyncio.Future[tuple[float, Event]] | None = None
        self.t_heartbeat = 0.0
        # Worst lateness of any frame (speech or silence) sent while this was current.
        self.late_max_ms = 0.0

    def fail(self, exc: BaseException) -> None:
        for fut in (self.onset, self.end):
            if not fut.done():
                fut.set_exception(exc)


class Mic:
    """A live microphone on the session: one 200 ms frame every 200 ms on an
    absolute schedule from `start()` (a late frame never shifts the later ones),
    silence unless speaking, until `stop()`."""

    def __init__(self, session: LoadSession, silence: str) -> None:
        self._session = session
        self._silence = silence
        self._said: Said | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, at: float | None = None) -> None:
        """Start streaming at monotonic time `at` (now by default)."""
        self._task = asyncio.create_task(self._run(time.monotonic() if at is None else at))

    def say(
        self,
        frames: Sequence[str],
        speech_end: int = -1,
        on_end: Callable[[float], None] | None = None,
    ) -> Said:
        """Speak `frames` from the next frame slot on, then silence again.

        `on_end(t)` is called right after frame `speech_end` (the last one by
        default) is sent at client time `t`, before any other task runs."""
        if self._said is not None:
            self._said.fail(SessionError("interrupted"))
        self._said = Said(frames, speech_end, on_end)
        return self._said

    async def _run(self, t0: float) -> None:
        i = 0
        try:
            while True:
                delay = t0 + i * CHUNK_MS / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                said = self._said
                if said is not None:
                    said.late_max_ms = max(said.late_max_ms, -delay * 1000)
                k = -1
                if said is not None and said.sent < len(said.frames):
                    k = said.sent
                    said.sent += 1
                    await self._session.ws.send(said.frames[k])
                else:
                    await self._session.ws.send(self._silence)
                t = time.monotonic()
                if said is not None and k >= 0:
                    if k == 0 and not said.onset.done():
                        said.onset.set_result(t)
                    if k == said.speech_end and not said.end.done():
                        said.end.set_result(t)
                        if said.on_end is not None:
                            said.on_end(t)
                    if k == said.heartbeat_at:
                        said.heartbeat = self._session.expect("session.heartbeat_ack")
                        said.t_heartbeat = time.monotonic()
                        await self._session.ws.send(HEARTBEAT)
                i += 1
        except Exception as exc:  # the socket went away: the waiters learn why
            if self._said is not None:
                code = self._session.closed_code or type(exc).__name__
                self._said.fail(SessionError(code))
            raise

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass  # a socket that went away is the turn's to report


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
        t_onset = await mic.say(barge).onset
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
