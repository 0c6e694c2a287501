"""What end of speech -> first audio depends on (issue 27), for `bench.load`: the
`semantic_vad` lane, the preemptive answers' counters per level, and the gap at
the first join of an answer's audio.

- `SEMANTIC_VAD`: the `server_vad` lane's live microphone, with the server's
  semantic end of turn (`eagerness` left out: the server's default, `auto`).
  `register_lanes()` adds it to the load generator's `LANES`, which every
  non-manual lane drives as a live microphone.
- `Preemptive`: `antiphon_session_preemptive_answers_total{outcome}` and
  `antiphon_stage0_utterance_pauses_total{outcome}`, scraped before and after
  a level; the level's JSON gets their deltas as `preemptive`.
- `first_join_gaps()`: while it is open, each turn's gap between its answer's
  first and second audio delta (the first of the `chunk_gaps_ms` whose largest
  is `audio_chunk_gap_max_ms`: arrival times on the client clock) is noted;
  `add_first_join` files them in the level as `audio_first_join_gap_ms`.

The load generator lives in the client package (antiphon.client.load); these
hook into it from outside, and belong in it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import antiphon.client.load.run as load_run
from antiphon.client.collector import Timings
from antiphon.client.events import Event
from antiphon.client.load import LANES, LoadSession, TurnResult
from antiphon.client.load.report import stats
from antiphon.client.load.session import TurnLog
from bench.lib.prometheus import scrape

SEMANTIC_VAD: dict[str, Any] = {
    "type": "realtime",
    "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}},
}

# The session setting `preemptive_answers` (SessionSettings, env prefix ANTIPHON_).
PREEMPT_OFF_ENV = {"ANTIPHON_PREEMPTIVE_ANSWERS": "false"}

SESSION_COUNTER = "antiphon_session_preemptive_answers_total"
STAGE0_COUNTER = "antiphon_stage0_utterance_pauses_total"
# Outcomes reported even at zero (the rest only when they happened).
ALWAYS = {SESSION_COUNTER: ("started", "used"), STAGE0_COUNTER: ("reported", "resumed", "ended")}
_OUTCOME = re.compile(r'outcome="([^"]*)"')


def register_lanes() -> None:
    LANES.setdefault("semantic_vad", SEMANTIC_VAD)


def outcomes(samples: dict[str, float], name: str) -> dict[str, float]:
    """A counter's value by its `outcome` label."""
    out: dict[str, float] = {}
    for key, value in samples.items():
        if key.startswith(name + "{") and (m := _OUTCOME.search(key)):
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


class Preemptive:
    """The preemptive counters of one stack: `mark()` before a level, `delta()` after."""

    def __init__(self, session_port: int, stage0_port: int) -> None:
        self.ports = {SESSION_COUNTER: session_port, STAGE0_COUNTER: stage0_port}
        self._before: dict[str, dict[str, float]] = {}

    def _read(self) -> dict[str, dict[str, float]]:
        return {name: outcomes(scrape([port]), name) for name, port in self.ports.items()}

    def mark(self) -> None:
        self._before = self._read()

    def delta(self) -> dict[str, dict[str, int]]:
        after = self._read()
        out: dict[str, dict[str, int]] = {}
        for name, key in ((SESSION_COUNTER, "session"), (STAGE0_COUNTER, "stage0_pauses")):
            before = self._before.get(name, {})
            d = {k: int(v - before.get(k, 0.0)) for k, v in after[name].items()}
            out[key] = {k: d.get(k, 0) for k in ALWAYS[name]} | {
                k: n for k, n in sorted(d.items()) if n and k not in ALWAYS[name]
            }
        return out


# ------------------------------------------------------------ the first join
_first_join: dict[tuple[int, int], float] | None = None


class _FirstJoinSession(LoadSession):
    """A load session that notes, per turn, the gap at its answer's first join."""

    def _measure(
        self, result: TurnResult, log: TurnLog, t0: float, t_eos: float, done: Event | None
    ) -> Timings | None:
        timing = super()._measure(result, log, t0, t_eos, done)
        # The turns whose audio_gap_max_ms is measured (its first audio came).
        if (
            _first_join is not None
            and timing is not None
            and timing.end_of_speech_to_first_audio_ms is not None
            and timing.chunk_gaps_ms
        ):
            _first_join[(result.session, result.turn)] = round(timing.chunk_gaps_ms[0], 2)
        return timing


@contextmanager
def first_join_gaps() -> Iterator[dict[tuple[int, int], float]]:
    """The first-join gaps of the turns `run_level` runs meanwhile, by (session, turn)."""
    global _first_join
    gaps: dict[tuple[int, int], float] = {}
    _first_join = gaps
    setattr(load_run, "LoadSession", _FirstJoinSession)  # noqa: B010 (mypy: "Cannot assign to a type")
    try:
        yield gaps
    finally:
        setattr(load_run, "LoadSession", LoadSession)  # noqa: B010
        _first_join = None


def add_first_join(level: dict[str, Any], gaps: dict[tuple[int, int], float]) -> None:
    """Each turn's first-join gap, and the level's percentiles of them."""
    values = []
    for turn in level["turns"]:
        gap = gaps.get((turn["session"], turn["turn"]))
        turn["audio_first_join_gap_ms"] = gap
        if gap is not None:
            values.append(gap)
    level["audio_first_join_gap_ms"] = stats(values, 50, 95, 99)
    level["samples"]["audio_first_join_gap_ms"] = values


# ------------------------------------------------------------ the printed table
def _p(s: dict[str, Any] | None, *keys: str) -> str:
    return "/".join(f"{s[k]:.0f}" for k in keys) if s else "-"


def print_table(backend: str, levels: list[dict[str, Any]], header: bool) -> None:
    """The load table's companion: preemptive answers used/started and why the rest
    were dropped, stage0's pauses, the first-join and largest audio gaps."""
    if header:
        print(
            f"{'backend':<10}{'lane':<13}{'sess':>5}  {'pre used/started':<17}"
            f"{'pauses rep/res/end':<19}{'1st join p50/p95':<17}{'gap max p50/p99':<16}"
            "pre dropped"
        )
    for lv in levels:
        pre = lv.get("preemptive") or {}
        s, p = pre.get("session") or {}, pre.get("stage0_pauses") or {}
        used = f"{s['used']}/{s['started']}" if s else "-"
        pauses = f"{p['reported']}/{p['resumed']}/{p['ended']}" if p else "-"
        dropped = " ".join(f"{k}={n}" for k, n in s.items() if k not in ("started", "used"))
        print(
            f"{backend:<10}{lv.get('lane', 'manual'):<13}{lv['sessions']:>5}  {used:<17}"
            f"{pauses:<19}{_p(lv.get('audio_first_join_gap_ms'), 'p50', 'p95'):<17}"
            f"{_p(lv.get('audio_chunk_gap_max_ms'), 'p50', 'p99'):<16}{dropped or '-'}",
            flush=True,
        )
