"""A unit model's voice (`--model minicpmo`: the stage1 `minicpmo` worker, talker and
token2wav), driven beside its thinker as the session service drives it, and what a
level's window says of it.

Each ModelFrame goes on to the session's stage1 stream as a DecodeFrame
(services/session's `on_model_frame`): a SPEAK frame with its text tokens in
the session's current response (a new id once the last one ended), a LISTEN
frame with no response (the voice drops an open turn). A response ends, with
a final SynthesizeText, at the frame that says `turn_ended` or at the first
LISTEN frame after it spoke. Stage1 speaks a session's units in order, one
AudioChunk each, so a chunk is the oldest spoken unit of its response still
waiting (units of an older response still waiting got none).

Per session, of the units closed in the window: `voice_latency_ms`, a spoken
unit's ModelFrame received -> its AudioChunk received (the voice's own
delay); `first_audio_ms`, the append that closed a response's first unit ->
that response's first chunk (what a user waits after the model decides to
speak: thinker and voice), and `first_audio_warmup_ms`, the same of
responses opened in the warm-up (a thinker with random weights speaks every
unit from a session's first, so its one response opens there and the
window has none: this is then the only first audio a run shows, each
session's, its voice's start under the level's load included); the spoken
units that got no chunk (dropped by the worker, or later than the clients
waited); and the seconds of audio those units brought, per session-second
of the window, which keep pace when about equal to the share of units
spoken (a second each; a turn's first chunk is 160 ms short, its last
120 ms long). Counted by unit, not by arrival: a session's chunks arrive
once a second at its own phase, and a window a few seconds long would hold
one more or less of them at its edges.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from antiphon.v1 import stage_pb2 as pb
from bench.duplex.clients import Schedule, SessionRecord
from bench.lib.prometheus import metric_sum, step_window
from bench.lib.stats import pct

# Real time for the voice: every spoken unit's audio within this of its frame.
VOICE_MAX_MS = 1000.0
UNIT_HISTOGRAM = "antiphon_stage1_duplex_unit_seconds"
BATCH_HISTOGRAM = "antiphon_stage1_duplex_batch_units"
UNITS_COUNTER = "antiphon_stage1_duplex_units_total"
OUTCOMES = ("spoken", "silent", "dropped")


@dataclass
class _Spoken:
    response_id: str
    frame_at: float
    # When the append that closed the unit was sent.
    closed_at: float


class UnitVoice:
    """One session's stage1 side: its frames forwarded, its audio matched to them."""

    def __init__(
        self,
        session_id: str,
        queue: asyncio.Queue[Any],
        rec: SessionRecord,
        sched: Schedule,
        closed: dict[int, float],
    ) -> None:
        self._sid = session_id
        self._queue = queue
        self._rec = rec
        self._sched = sched
        self._closed = closed
        self._responses = 0
        self._response = ""
        self._waiting: deque[_Spoken] = deque()
        # Responses whose first unit closed in the level (warm-up or window),
        # their first audio not yet heard: when it closed, and whether in the window.
        self._first: dict[str, tuple[float, bool]] = {}

    def _in_window(self, t: float) -> bool:
        return self._sched.window_start <= t < self._sched.end

    def frame(self, f: pb.ModelFrame, t: float) -> None:
        """A ModelFrame received at `t`: on to stage1."""
        if f.decision != pb.DECISION_SPEAK:
            self._end(f.epoch)
            self._send(pb.DecodeFrame(epoch=f.epoch, response_id="", index=f.index))
            return
        first = not self._response
        if first:
            self._responses += 1
            self._response = f"{self._sid}-r{self._responses}"
        closed_at = self._closed.get(f.index, t)
        in_window = self._in_window(closed_at)
        if in_window:
            self._rec.voice_units += 1
            if first:
                self._rec.voice_responses += 1
        if first and self._sched.start <= closed_at < self._sched.end:
            self._first[self._response] = (closed_at, in_window)
        self._waiting.append(_Spoken(self._response, t, closed_at))
        self._send(
            pb.DecodeFrame(
                epoch=f.epoch,
                response_id=self._response,
                tokens=f.tokens,
                text=f.text,
                index=f.index,
            )
        )
        if f.turn_ended:
            self._end(f.epoch)

    def _end(self, epoch: int) -> None:
        """The open response is over: stage1 ends it once its units are spoken."""
        if self._response:
            text = pb.SynthesizeText(epoch=epoch, response_id=self._response, final=True)
            self._queue.put_nowait(pb.Stage1Request(text=text))
            self._response = ""

    def _send(self, frame: pb.DecodeFrame) -> None:
        self._queue.put_nowait(pb.Stage1Request(frame=frame))

    def event(self, ev: pb.Stage1Event, t: float) -> None:
        """A Stage1Event received at `t`."""
        kind = ev.WhichOneof("kind")
        if kind == "audio":
            self._audio(ev.audio, t)
        elif kind == "error":
            self._rec.voice_error_events += 1
            self._rec.voice_error = (
                self._rec.voice_error or (f"stage1 {ev.error.code}: {ev.error.message}"[:200])
            )

    def _audio(self, chunk: pb.AudioChunk, t: float) -> None:
        rec = self._rec
        # Units of older responses still waiting were never spoken.
        while self._waiting and self._waiting[0].response_id != chunk.response_id:
            self._waiting.popleft()
        if not self._waiting:
            return
        unit = self._waiting.popleft()
        first = self._first.pop(chunk.response_id, None)
        if first is not None:
            first_closed, in_window = first
            waited = round((t - first_closed) * 1000, 2)
            (rec.first_audio_ms if in_window else rec.first_audio_warmup_ms).append(waited)
        if self._in_window(unit.closed_at):
            rec.voice_units_heard += 1
            rec.voice_audio_ms += chunk.duration_ms
            rec.voice_latency_ms.append(round((t - unit.frame_at) * 1000, 2))


def summarize_voice(
    records: Sequence[dict[str, Any]], sessions: int, window_s: float
) -> dict[str, Any]:
    """The sessions' side of a level's voice."""
    lat = [x for r in records for x in r["voice_latency_ms"]]
    first = [x for r in records for x in r["first_audio_ms"]]
    first_warmup = [x for r in records for x in r["first_audio_warmup_ms"]]
    spoken = sum(r["voice_units"] for r in records)
    heard = sum(r["voice_units_heard"] for r in records)
    closed = sum(r["units_closed"] for r in records)
    audio_s = sum(r["voice_audio_ms"] for r in records) / 1000
    errors: dict[str, int] = {}
    for r in records:
        if r["voice_error"]:
            key = r["voice_error"].split(":")[0]
            errors[key] = errors.get(key, 0) + 1
    return {
        "latency_ms": _spread(lat),
        "first_audio_ms": _spread(first),
        "first_audio_warmup_ms": _spread(first_warmup),
        "units_spoken": spoken,
        "units_heard": heard,
        # Spoken units whose audio never came (dropped, or past the clients' wait).
        "units_unheard": spoken - heard,
        "responses": sum(r["voice_responses"] for r in records),
        # Keeping pace: the window's units' audio seconds a session-second, about
        # the share of units spoken (a second each; a turn's first 160 ms less).
        "audio_s_per_session_s": round(audio_s / (sessions * window_s), 3) if sessions else None,
        "spoken_share": round(spoken / closed, 3) if closed else None,
        "error_events": sum(r["voice_error_events"] for r in records),
        "errors": errors,
        "error_sample": next((r["voice_error"] for r in records if r["voice_error"]), None),
    }


def first_audio(voice: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A level's first audio to show: the window's responses', or where the
    window opened none, the warm-up's (marked)."""
    window = voice["first_audio_ms"]
    warmup = voice.get("first_audio_warmup_ms")
    if window["count"] or not warmup or not warmup["count"]:
        return window, ""
    return warmup, " (warm-up)"


def _spread(values: list[float]) -> dict[str, Any]:
    return {
        "count": len(values),
        "p50": pct(values, 50),
        "p99": pct(values, 99),
        "max": pct(values, 100),
    }


def worker_voice(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """The stage1 worker's metrics between two scrapes: a unit's time in its batch
    (queue to audio), batch sizes, and units by outcome."""
    count = metric_sum(after, BATCH_HISTOGRAM + "_count") - metric_sum(
        before, BATCH_HISTOGRAM + "_count"
    )
    total = metric_sum(after, BATCH_HISTOGRAM + "_sum") - metric_sum(
        before, BATCH_HISTOGRAM + "_sum"
    )
    units = {}
    for outcome in OUTCOMES:
        key = f'{UNITS_COUNTER}{{outcome="{outcome}"}}'
        units[outcome] = round(after.get(key, 0.0) - before.get(key, 0.0), 1)
    return {
        "worker_unit_ms": step_window(before, after, UNIT_HISTOGRAM),
        "batches": int(count),
        "batch_units_mean": round(total / count, 2) if count else None,
        "worker_units": units,
    }


def voice_real_time(voice: dict[str, Any]) -> bool:
    """Every spoken unit's audio within VOICE_MAX_MS of its frame, none unheard or
    dropped, no error (and something spoken to judge by)."""
    lat = voice["latency_ms"]
    return bool(
        voice["units_spoken"] > 0
        and lat["max"] is not None
        and lat["max"] < VOICE_MAX_MS
        and voice["units_unheard"] == 0
        and voice["worker_units"]["dropped"] == 0
        and voice["error_events"] == 0
    )
