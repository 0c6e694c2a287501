"""Latency on the client clock: what a listener of the session would measure.

An `EventCollector` listens to a client's events (each stamped when its
frame was read) and to the marks the caller sets (a commit sent, the end of
the user's speech), and reports per response:

- commit -> first audio, and end of speech -> first audio;
- the gaps between audio chunks as they arrive;
- playback stalls: a player that starts at the first chunk and plays in real
  time runs dry when a chunk arrives after everything before it was played.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from antiphon.client import audio
from antiphon.client.events import AudioDelta, Event, ResponseCreated, ResponseDone


@dataclass
class ResponseTiming:
    response_id: str
    created_at: float
    first_audio_at: float | None = None
    last_audio_at: float | None = None
    done_at: float | None = None
    status: str = ""
    audio_ms: float = 0.0
    chunk_gaps_ms: list[float] = field(default_factory=list)
    # Silence a player that starts at the first delta hears before each later
    # one (0 where it was still playing): what a listener hears of a join.
    join_silences_ms: list[float] = field(default_factory=list)
    stalls: int = 0
    stall_ms: float = 0.0
    # When the simulated player has played everything it was given.
    _played_until: float = 0.0

    def chunk(self, at: float, ms: float) -> None:
        if self.first_audio_at is None:
            self.first_audio_at, self._played_until = at, at
        else:
            assert self.last_audio_at is not None
            self.chunk_gaps_ms.append((at - self.last_audio_at) * 1000)
            self.join_silences_ms.append(max(0.0, at - self._played_until) * 1000)
            if at > self._played_until:
                self.stalls += 1
                self.stall_ms += (at - self._played_until) * 1000
                self._played_until = at
        self.last_audio_at = at
        self._played_until += ms / 1000
        self.audio_ms += ms


@dataclass(frozen=True)
class Timings:
    """One response's timings, in milliseconds on the client clock."""

    response_id: str
    status: str
    commit_to_first_audio_ms: float | None
    end_of_speech_to_first_audio_ms: float | None
    audio_ms: float
    chunk_gaps_ms: list[float]
    join_silences_ms: list[float]
    stalls: int
    stall_ms: float


class EventCollector:
    """`client.add_listener(collector.record)`, then `mark_commit()` /
    `mark_end_of_speech(t)` as the turn goes; `timings()` at any time."""

    def __init__(self, output_rate: int = audio.WIRE_RATE) -> None:
        self._rate = output_rate
        self.events: list[Event] = []
        self._commits: list[float] = []
        self._speech_ends: list[float] = []
        self._responses: dict[str, ResponseTiming] = {}

    def record(self, event: Event) -> None:
        self.events.append(event)
        at = event.received_at or time.monotonic()
        if isinstance(event, ResponseCreated):
            self._responses[event.response_id] = ResponseTiming(event.response_id, at)
            return
        timing = self._responses.get(event.response_id)
        if timing is None:
            return
        if isinstance(event, AudioDelta):
            pcm = event.audio
            timing.chunk(at, audio.duration_ms(pcm, event.sample_rate_hz or self._rate))
        elif isinstance(event, ResponseDone):
            timing.done_at, timing.status = at, event.status

    def mark_commit(self, at: float | None = None) -> None:
        self._commits.append(time.monotonic() if at is None else at)

    def mark_end_of_speech(self, at: float) -> None:
        self._speech_ends.append(at)

    def count(self, type_: str) -> int:
        return sum(1 for e in self.events if e.type == type_)

    def timings(self) -> list[Timings]:
        """Every response seen so far, in the order they were created."""
        return [self._timings(t) for t in self._responses.values()]

    def _timings(self, t: ResponseTiming) -> Timings:
        return Timings(
            response_id=t.response_id,
            status=t.status,
            commit_to_first_audio_ms=_since(self._commits, t.first_audio_at),
            end_of_speech_to_first_audio_ms=_since(self._speech_ends, t.first_audio_at),
            audio_ms=t.audio_ms,
            chunk_gaps_ms=list(t.chunk_gaps_ms),
            join_silences_ms=list(t.join_silences_ms),
            stalls=t.stalls,
            stall_ms=t.stall_ms,
        )


def _since(marks: list[float], at: float | None) -> float | None:
    """Milliseconds from the last mark before `at` to `at`."""
    if at is None:
        return None
    before = [m for m in marks if m <= at]
    return (at - before[-1]) * 1000 if before else None
