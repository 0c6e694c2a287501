"""One session of the load generator: a `DuplexClient` taking timed turns.

The client's reader stamps every event with the monotonic clock as its frame
is read; a listener files each one in the turn's log and in its
`EventCollector`, and the turn reads its measures back from them when it is
over, so no event can be missed by a waiter that woke late.

- manual lane: 200 ms appends paced in real time from a start time, a
  `session.heartbeat` after the middle one, `input_audio_buffer.commit` and
  `response.create` right after the last one, then the answer to
  `response.done`;
- `server_vad`, `semantic_vad` and native lanes: a live `Microphone` says the
  question and goes on with silence, never stopping; the server alone
  decides when the user has finished. The answer is read to `response.done`
  and played out in real time, as a listener hears it, before the next
  question.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from antiphon.client.collector import EventCollector, Timings
from antiphon.client.duplex import DuplexClient
from antiphon.client.errors import ClientError, Refused, ServerUnreachable
from antiphon.client.events import AudioDelta, ErrorEvent, Event, ResponseDone
from antiphon.client.load.questions import CHUNK_BYTES, CHUNK_MS, Question
from antiphon.client.microphone import Microphone

CHUNK_S = CHUNK_MS / 1000
TRANSCRIPT = "conversation.item.input_audio_transcription.completed"
ANSWER = ("response.output_audio_transcript.done", "response.audio_transcript.done")
HEARTBEAT_ACK = "session.heartbeat_ack"
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
        HEARTBEAT_ACK,
    }
)
_HEARTBEAT = {"type": "session.heartbeat"}
# Wakes a waiter that waits on a future as well as on events.
_WAKE = Event({})


class SessionError(Exception):
    """The session cannot go on (closed, refused, timed out); `code` says why."""

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
    # Largest gap between the arrivals of consecutive audio deltas.
    audio_gap_max_ms: float | None = None
    # Silence a player that starts at the first delta hears: the longest, and
    # at the first join (before the second delta; 0 while it was still playing).
    audio_silence_max_ms: float | None = None
    audio_first_join_silence_ms: float | None = None
    audio_deltas: int = 0
    # Gaps between consecutive server events from the commit to `response.done`.
    event_gaps_ms: list[float] = field(default_factory=list)
    # `session.heartbeat` -> `session.heartbeat_ack`, sent mid-turn.
    heartbeat_ms: float | None = None
    # How late the paced appends went out, worst case (client-side lag).
    send_late_max_ms: float = 0.0


def audio_joins(silences_ms: Sequence[float]) -> tuple[float | None, float | None]:
    """From the silence a player heard before each of a response's audio deltas
    but the first: the longest, and the first join's. A join needs two
    deltas: a one-chunk answer has neither."""
    if not silences_ms:
        return None, None
    return round(max(silences_ms), 2), round(silences_ms[0], 2)


class LoadClient(DuplexClient):
    """A `DuplexClient` that notes when each `input_audio_buffer.append` went
    out, whoever paced it (the manual lane or a `Microphone`): a turn reads
    back when its end of speech was sent and how late its sends were."""

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(url, **options)
        self.appends = 0  # appends sent since the session opened
        self._sent: list[float] = []  # when each of them went out, from `_sent_from` on
        self._sent_from = 0

    async def append_audio(self, pcm16: bytes) -> None:
        await super().append_audio(pcm16)
        self._sent.append(time.monotonic())
        self.appends += 1

    def sent_at(self, n: int) -> float:
        """When append `n` (counted from 0 since the session opened) went out."""
        return self._sent[n - self._sent_from]

    def last_sent_by(self, t: float) -> int:
        """The number of the last append that went out at or before `t`."""
        return self._sent_from + bisect.bisect_right(self._sent, t) - 1

    def late_ms(self, first: int, origin: tuple[int, float]) -> float:
        """The worst lateness of appends `first`... on a schedule of one per
        chunk where append `origin[0]` was due at `origin[1]`."""
        n, due = origin
        late = [self.sent_at(k) - due - (k - n) * CHUNK_S for k in range(first, self.appends)]
        return max([0.0, *late]) * 1000

    def forget(self, before: int) -> None:
        """Drop the send times of appends before `before` (memory stays bounded)."""
        drop = max(0, min(before, self.appends) - self._sent_from)
        del self._sent[:drop]
        self._sent_from += drop


class TurnLog:
    """What one turn saw: the events of `LOGGED`, every event's receipt time,
    and the audio deltas as (time, response id)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.times: list[float] = []
        self.audio: list[tuple[float, str]] = []

    def first(self, kind: str, after: float = 0.0, response_id: str = "") -> Event | None:
        for e in self.events:
            if e.type == kind and e.received_at >= after:
                if not response_id or e.response_id == response_id:
                    return e
        return None

    def ms_after(self, t0: float, kind: str) -> float | None:
        """Milliseconds from `t0` to the first `kind` after it."""
        e = self.first(kind, t0)
        return round((e.received_at - t0) * 1000, 2) if e is not None else None

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events if e.type == kind)

    def said(self, *kinds: str) -> list[str]:
        return [str(e.raw.get("transcript") or "").strip() for e in self.events if e.type in kinds]

    def gaps_ms(self, start: float, end: float) -> list[float]:
        """Gaps between consecutive events from `start` to `end`, the first from `start`."""
        times = [t for t in self.times if start <= t <= end]
        return [round((b - a) * 1000, 3) for a, b in zip([start, *times], times, strict=False)]


class LoadSession:
    """One session of the load and its measures; its turns run one at a time."""

    def __init__(self, index: int, client: LoadClient) -> None:
        self.index = index
        self.client = client
        self.errors: Counter[str] = Counter()
        self.log = TurnLog()
        self.collector = EventCollector()
        # Live lanes: the appends up to this one have had their lateness measured.
        self._late_from = 0
        client.add_listener(self._record)

    @classmethod
    async def open(
        cls, index: int, url: str, session: dict[str, Any], timeout_s: float, **options: Any
    ) -> Self:
        """A session opened on `url` with `session` (a refusal raises its code).

        Without `reconnect` in `options` a lost connection ends the session:
        a load run counts drops, it does not hide them."""
        options.setdefault("reconnect", None)
        # The turns send their own heartbeat and time its ack.
        options.setdefault("heartbeat_s", 0)
        client = LoadClient(url, session=session, open_timeout_s=timeout_s, **options)
        s = cls(index, client)
        await s.start()
        return s

    async def start(self) -> None:
        try:
            await self.client.open()
        except Refused as exc:
            raise SessionError(exc.code or f"http_{exc.status or 'refused'}") from exc
        except ServerUnreachable as exc:
            raise SessionError(f"connect_{type(exc.__cause__).__name__}") from exc
        except TimeoutError as exc:
            raise SessionError("open_timeout") from exc
        except ClientError as exc:
            raise SessionError(self.closed_code or type(exc).__name__) from exc
        self.collector = EventCollector(self.client.output_rate)

    @property
    def session(self) -> dict[str, Any]:
        """The session the server settled on (its `session.updated`)."""
        return self.client.session

    @property
    def closed_code(self) -> str:
        """Why the session is over, as an error code ("" while it is not)."""
        ended = self.client.ended
        if not ended:
            return ""
        return "ws_closed" if ended == "connection lost" else "session_" + ended.replace(" ", "_")

    # ------------------------------------------------------------ events
    def _record(self, event: Event) -> None:
        t = event.received_at
        log = self.log
        log.times.append(t)
        kind = event.type
        if kind in LOGGED:
            log.events.append(event)
        elif isinstance(event, AudioDelta):
            log.audio.append((t, event.response_id))
        elif isinstance(event, ErrorEvent):
            self.errors[event.code or "error"] += 1
        self.collector.record(event)

    def new_turn(self) -> TurnLog:
        """A fresh log and collector: what a turn measures is its own."""
        self.log = TurnLog()
        self.collector = EventCollector(self.client.output_rate)
        return self.log

    async def until(
        self,
        done: Callable[[], object],
        timeout_s: float,
        wake: asyncio.Future[Any] | None = None,
    ) -> None:
        """Until `done()` is true, checked at each event (and when `wake` is done).
        TimeoutError after `timeout_s`; SessionError if the session ends first."""
        queue = self.client.subscribe()
        if wake is not None:
            wake.add_done_callback(lambda _: queue.put_nowait(_WAKE))
        try:
            async with asyncio.timeout(timeout_s):
                while not done():
                    if await queue.get() is None:
                        raise SessionError(self.closed_code or "closed")
        finally:
            self.client.unsubscribe(queue)

    async def _send(self, event: dict[str, Any]) -> float:
        """Send `event`; returns when the send began (an answer can come in before
        the send returns). A closed session raises SessionError."""
        t = time.monotonic()
        try:
            await self.client.send(event)
        except ClientError as exc:
            raise SessionError(self.closed_code or type(exc).__name__) from exc
        return t

    async def heartbeat(self, timeout_s: float) -> float | None:
        """A `session.heartbeat` now; its round trip in ms (None: no ack in time).
        The server answers in order: once acked, everything sent before is in."""
        return await self._heartbeat_rtt(self.log, await self._send(_HEARTBEAT), timeout_s)

    async def _heartbeat_rtt(self, log: TurnLog, sent_at: float, timeout_s: float) -> float | None:
        try:
            await self.until(lambda: log.first(HEARTBEAT_ACK, sent_at), timeout_s)
        except (TimeoutError, SessionError):
            self.errors["heartbeat_lost"] += 1
            return None
        ack = log.first(HEARTBEAT_ACK, sent_at)
        assert ack is not None
        return round((ack.received_at - sent_at) * 1000, 2)

    async def _transcript(self, log: TurnLog, grace_s: float) -> str | None:
        """The user transcripts of the turn, joined; waits up to `grace_s` for one
        to come. None: the server sent no transcription at all."""
        if grace_s > 0:
            try:
                await self.until(lambda: log.first(TRANSCRIPT), grace_s)
            except (TimeoutError, SessionError):
                pass
        heard = log.said(TRANSCRIPT)
        return " ".join(heard).strip() if heard else None

    def _timing(self, response_id: str) -> Timings | None:
        return next((t for t in self.collector.timings() if t.response_id == response_id), None)

    def _measure(
        self, result: TurnResult, log: TurnLog, t0: float, t_eos: float, done: Event | None
    ) -> Timings | None:
        """Fill in what the response answering the turn (the first created after
        `t0`) measured; returns its timings."""
        created = log.first("response.created", t0)
        timing = self._timing(created.response_id) if created is not None else None
        if isinstance(done, ResponseDone):
            result.status, result.reason = done.status, done.reason
            result.eos_done_ms = round((done.received_at - t_eos) * 1000, 2)
        if timing is not None and timing.end_of_speech_to_first_audio_ms is not None:
            result.eos_first_audio_ms = round(timing.end_of_speech_to_first_audio_ms, 2)
            if timing.commit_to_first_audio_ms is not None:
                result.first_audio_ms = round(timing.commit_to_first_audio_ms, 2)
            gaps = timing.chunk_gaps_ms
            result.audio_gap_max_ms = round(max(gaps), 2) if gaps else None
            result.audio_silence_max_ms, result.audio_first_join_silence_ms = audio_joins(
                timing.join_silences_ms
            )
            result.audio_deltas = len(gaps) + 1
        end = done.received_at if done is not None else time.monotonic()
        result.event_gaps_ms = log.gaps_ms(t0, end)
        result.responses = log.count("response.created")
        result.answer = " ".join(log.said(*ANSWER)).strip()
        return timing

    # ------------------------------------------------------------ turns
    async def turn(
        self,
        turn: int,
        question: Question,
        start_at: float,
        timeout_s: float,
        grace_s: float = 10.0,
    ) -> TurnResult:
        """One manual-lane turn: paced audio from `start_at` (monotonic), commit and
        `response.create` right after the last append, to `response.done`."""
        result = TurnResult(self.index, turn)
        log = self.new_turn()
        client = self.client
        first = client.appends
        client.forget(first)
        pcm, middle = question.pcm16, question.chunks // 2
        t_hb = 0.0
        try:
            for k in range(question.chunks):
                await asyncio.sleep(max(0.0, start_at + k * CHUNK_S - time.monotonic()))
                await client.append_audio(pcm[k * CHUNK_BYTES : (k + 1) * CHUNK_BYTES])
                if k == middle:
                    t_hb = await self._send(_HEARTBEAT)
            t_commit = await self._send({"type": "input_audio_buffer.commit"})
            await self._send({"type": "response.create"})
        except ClientError as exc:
            raise SessionError(self.closed_code or type(exc).__name__) from exc
        result.send_late_max_ms = round(client.late_ms(first, (first, start_at)), 1)
        t_eos = client.sent_at(first + question.speech_end)
        self.collector.mark_end_of_speech(t_eos)
        self.collector.mark_commit(t_commit)
        done: Event | None = None
        try:
            await self.until(lambda: log.first("response.done", t_commit), timeout_s)
            done = log.first("response.done", t_commit)
        except TimeoutError:
            result.status = "timeout"
        self._measure(result, log, t_commit, t_eos, done)
        if done is not None:
            result.done_ms = round((done.received_at - t_commit) * 1000, 2)
        if t_hb:
            result.heartbeat_ms = await self._heartbeat_rtt(log, t_hb, timeout_s)
        result.transcript = await self._transcript(log, grace_s if done is not None else 0.0)
        return result

    async def live_turn(
        self,
        turn: int,
        lane: str,
        mic: Microphone,
        question: Question,
        timeout_s: float,
        no_response_s: float,
        grace_s: float = 10.0,
        origin: tuple[int, float] | None = None,
    ) -> TurnResult:
        """One `server_vad`, `semantic_vad` or native turn: the live `mic` says `question` and goes
        on with silence; no commit, no `response.create`. Waits for the server's
        answer to `response.done` (a `no_response` turn when none starts within
        `no_response_s` of the end of speech), then for it to play out in real
        time, as a listener would, before the next question.

        `origin` (an append's number and when it was due) is the microphone's
        schedule, against which the lateness of its sends is measured."""
        result = TurnResult(self.index, turn, lane=lane)
        log = self.new_turn()
        client = self.client
        # Every chunk since the last turn was measured counts: the silence too.
        first = max(self._late_from, origin[0] if origin is not None else client.appends)
        client.forget(first)
        heartbeat = asyncio.create_task(self._heartbeat_later(question.audio_ms / 2000))
        said = asyncio.ensure_future(mic.say(question.pcm16))
        try:
            await self.until(said.done, question.audio_ms / 1000 + timeout_s, wake=said)
            t_eos = said.result()
            self.collector.mark_end_of_speech(t_eos)
            done: Event | None = None
            try:
                await self.until(
                    lambda: (
                        log.first("response.created", t_eos) or log.first("response.done", t_eos)
                    ),
                    no_response_s,
                )
            except TimeoutError:
                result.status = "no_response"
            else:
                try:
                    await self.until(lambda: log.first("response.done", t_eos), timeout_s)
                    done = log.first("response.done", t_eos)
                except TimeoutError:
                    result.status = "timeout"
            t_hb = await heartbeat
        finally:
            for task in (said, heartbeat):
                task.cancel()
        if origin is not None:
            result.send_late_max_ms = round(client.late_ms(first, origin), 1)
            self._late_from = client.appends
        timing = self._measure(result, log, t_eos, t_eos, done)
        result.eos_speech_stopped_ms = log.ms_after(t_eos, "input_audio_buffer.speech_stopped")
        result.eos_committed_ms = log.ms_after(t_eos, "input_audio_buffer.committed")
        result.eos_created_ms = log.ms_after(t_eos, "response.created")
        if t_hb:
            result.heartbeat_ms = await self._heartbeat_rtt(log, t_hb, timeout_s)
        result.transcript = await self._transcript(log, grace_s if done is not None else 0.0)
        if timing is not None and result.eos_first_audio_ms is not None:
            # The listener hears the answer out before speaking again.
            first_audio = t_eos + result.eos_first_audio_ms / 1000
            played = first_audio + timing.audio_ms / 1000 - time.monotonic()
            if played > 0:
                await asyncio.sleep(played)
        return result

    async def _heartbeat_later(self, delay_s: float) -> float:
        """A `session.heartbeat` `delay_s` from now (mid-utterance); when it went out."""
        await asyncio.sleep(delay_s)
        try:
            return await self._send(_HEARTBEAT)
        except SessionError:
            return 0.0

    async def close(self) -> None:
        """`session.close` (frees the admission slot at once), then the socket."""
        try:
            await self.client.close()
        except (ClientError, OSError):
            pass
