"""The preemptive answers' counters per level, for `bench.load` (issue 27: what
end of speech -> first audio depends on).

`Preemptive` scrapes `antiphon_session_preemptive_answers_total{outcome}` and
`antiphon_stage0_utterance_pauses_total{outcome}` (every front end's) before
and after a level; the level's JSON gets their deltas as `preemptive`, and
`print_table` a line beside the load table's, with stage1's first text ->
first audio and its parts (means, from the level's `stages`). The
`semantic_vad` lane and the silence heard at an answer's joins
(`audio_first_join_silence_ms`, `audio_silence_max_ms`) are the load
generator's own (`antiphon.client.load`).
"""

from __future__ import annotations

import re
from typing import Any

from bench.lib.prometheus import scrape

# The session setting `preemptive_answers` (SessionSettings, env prefix ANTIPHON_).
PREEMPT_OFF_ENV = {"ANTIPHON_PREEMPTIVE_ANSWERS": "false"}

SESSION_COUNTER = "antiphon_session_preemptive_answers_total"
STAGE0_COUNTER = "antiphon_stage0_utterance_pauses_total"
# Outcomes reported even at zero (the rest only when they happened).
ALWAYS = {SESSION_COUNTER: ("started", "used"), STAGE0_COUNTER: ("reported", "resumed", "ended")}
_OUTCOME = re.compile(r'outcome="([^"]*)"')


def outcomes(samples: dict[str, float], name: str) -> dict[str, float]:
    """A counter's value by its `outcome` label."""
    out: dict[str, float] = {}
    for key, value in samples.items():
        if key.startswith(name + "{") and (m := _OUTCOME.search(key)):
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


class Preemptive:
    """The preemptive counters of one stack: `mark()` before a level, `delta()` after."""

    def __init__(self, session_ports: list[int], stage0_ports: list[int]) -> None:
        self.ports = {SESSION_COUNTER: session_ports, STAGE0_COUNTER: stage0_ports}
        self._before: dict[str, dict[str, float]] = {}

    def _read(self) -> dict[str, dict[str, float]]:
        return {name: outcomes(scrape(ports), name) for name, ports in self.ports.items()}

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


def print_table(backend: str, levels: list[dict[str, Any]], header: bool) -> None:
    """The load table's companion: preemptive answers used/started and why the rest
    were dropped, stage0's pauses, stage1's first audio and its parts, and how
    late stage0's and the session's event loops ran (mean)."""
    if header:
        print(
            f"{'backend':<10}{'lane':<13}{'sess':>5}  {'pre used/started':<17}"
            f"{'pauses rep/res/end':<19}{'stage1 1st audio = words+queue+voice ms':<41}"
            f"{'loop lag ms s0/session':<23}pre dropped"
        )
    for lv in levels:
        pre = lv.get("preemptive") or {}
        s, p = pre.get("session") or {}, pre.get("stage0_pauses") or {}
        used = f"{s['used']}/{s['started']}" if s else "-"
        pauses = f"{p['reported']}/{p['resumed']}/{p['ended']}" if p else "-"
        dropped = " ".join(f"{k}={n}" for k, n in s.items() if k not in ("started", "used"))
        print(
            f"{backend:<10}{lv.get('lane', 'manual'):<13}{lv['sessions']:>5}  {used:<17}"
            f"{pauses:<19}{_first_audio_parts(lv.get('stages') or {}):<41}"
            f"{_loop_lag(lv.get('stages') or {}):<23}{dropped or '-'}",
            flush=True,
        )


def _first_audio_parts(stages: dict[str, Any]) -> str:
    """Stage1's mean first text -> first audio, as its three parts add up to it."""
    means = [
        (stages.get(f"stage1_first_audio{part}") or {}).get("mean_ms")
        for part in ("", "_words", "_queue", "_voice")
    ]
    if any(m is None for m in means):
        return "-"
    whole, words, queue, voice = means
    return f"{whole:.0f} = {words:.0f}+{queue:.0f}+{voice:.0f}"


def _loop_lag(stages: dict[str, Any]) -> str:
    """Mean lag of stage0's front ends' loops and of the session's loop (which
    relays every append and every answer's audio)."""
    means = [
        (stages.get(f"{tier}_event_loop_lag") or {}).get("mean_ms")
        for tier in ("stage0", "session")
    ]
    return "/".join("-" if m is None else f"{m:.1f}" for m in means)
