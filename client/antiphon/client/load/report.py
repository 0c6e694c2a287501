"""A load run's summary per level, the table it prints and the PNG it draws.

The result shape is the one `bench/load.py` has always written (other tools
read it): one dict per level with the latency percentiles on the client
clock, the errors by code, the transcripts heard, the processes' CPU and
memory, and the raw samples the plot draws from.
"""

from __future__ import annotations

import os
import platform
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from antiphon.client.load.questions import Question
from antiphon.client.load.session import TurnResult

SERVICES = ("gateway", "session", "stage0", "stage1", "redis", "loadgen")


def service_names(levels: list[dict[str, Any]]) -> list[str]:
    """The process trees the levels sampled, in SERVICES' order, each service's
    replicas after it ("session", "session_1", ...: bench.load --session-replicas)."""
    seen = sorted({name for lv in levels for name in lv["processes"]}, key=lambda n: (len(n), n))
    return [
        name
        for service in SERVICES
        for name in seen
        if name == service
        or (name.startswith(f"{service}_") and name[len(service) + 1 :].isdigit())
    ]


def stats(values: Sequence[float], *ps: int) -> dict[str, float | int] | None:
    """Percentiles (linear interpolation), max and count; None without samples."""
    if not values:
        return None
    arr = np.asarray(values, dtype=np.float64)
    out: dict[str, float | int] = {f"p{p}": round(float(np.percentile(arr, p)), 2) for p in ps}
    out["max"] = round(float(arr.max()), 2)
    out["n"] = len(values)
    return out


def summarize_level(
    *,
    n: int,
    turns: int,
    opened: int,
    refused: Counter[str],
    aborted: Counter[str],
    errors: Counter[str],
    open_ms: list[float],
    results: list[TurnResult],
    turns_wall_s: float,
    lag_ms: list[float],
    usage: dict[str, dict[str, Any]],
    overhead: bool = False,
    lane: str = "manual",
    session: dict[str, Any] | None = None,
) -> dict[str, Any]:
    first = [r.first_audio_ms for r in results if r.first_audio_ms is not None]
    eos_first = [r.eos_first_audio_ms for r in results if r.eos_first_audio_ms is not None]
    eos_done = [r.eos_done_ms for r in results if r.eos_done_ms is not None]
    done = [r.done_ms for r in results if r.done_ms is not None]
    gaps = [r.audio_gap_max_ms for r in results if r.audio_gap_max_ms is not None]
    silent = [r.audio_silence_max_ms for r in results if r.audio_silence_max_ms is not None]
    joins = [
        r.audio_first_join_silence_ms for r in results if r.audio_first_join_silence_ms is not None
    ]
    heartbeat = [r.heartbeat_ms for r in results if r.heartbeat_ms is not None]
    event_gaps = [g for r in results for g in r.event_gaps_ms]
    statuses = Counter(r.status for r in results)
    # Every way a turn or a session went wrong, by code.
    codes: Counter[str] = Counter(errors)
    codes.update(aborted)
    for r in results:
        if r.status != "completed":
            codes[f"response_{r.status}" + (f":{r.reason}" if r.reason else "")] += 1
    # A turn the server heard nothing of is an error, whatever was answered:
    # an empty transcript means the lane did not hear the user.
    empty = sum(1 for r in results if r.transcript is not None and not r.transcript.strip())
    missing = sum(1 for r in results if r.transcript is None)
    if empty:
        codes["empty_transcript"] += empty
    if missing:
        codes["transcript_missing"] += missing
    split = sum(1 for r in results if r.responses > 1)
    level: dict[str, Any] = {
        "lane": lane,
        "sessions": n,
        "opened": opened,
        "refused": dict(refused),
        "turns_completed": statuses.get("completed", 0),
        "turns_expected": n * turns,
        "turns_wall_s": round(turns_wall_s, 1),
        "session_open_ms": stats(open_ms, 50, 99),
        # From the send of the last append holding speech (client clock): the
        # latency a speaker feels, whichever side ends the turn.
        "end_of_speech_to_first_audio_ms": stats(eos_first, 50, 95, 99),
        # The same by the session's turn: the first turns of a level end within
        # one utterance of each other (a burst, run.py), the later ones apart.
        "end_of_speech_to_first_audio_ms_by_turn": {
            str(t): stats(values, 50, 95) for t, values in _first_audio_by_turn(results).items()
        },
        "end_of_speech_to_done_ms": stats(eos_done, 50, 95, 99),
        "commit_to_first_audio_ms": stats(first, 50, 95, 99),
        "commit_to_done_ms": stats(done, 50, 95, 99),
        # Between the arrivals of an answer's audio deltas (not what is heard).
        "audio_chunk_gap_max_ms": stats(gaps, 50, 99),
        # Silence a listener hears inside an answer (a player that starts at its
        # first delta): its longest, and at its first join.
        "audio_silence_max_ms": stats(silent, 50, 95, 99),
        "audio_first_join_silence_ms": stats(joins, 50, 95, 99),
        "heartbeat_rtt_ms": stats(heartbeat, 50, 99),
        "event_gap_ms": stats(event_gaps, 50, 99),
        "responses": dict(statuses),
        "transcripts": {
            "heard": len(results) - empty - missing,
            "empty": empty,
            "missing": missing,
        },
        "turns_with_several_responses": split,
        "errors": {"count": sum(codes.values()), "codes": dict(codes)},
        "client": {
            "loop_lag_ms": stats(lag_ms, 50, 99),
            "send_late_max_ms": max((r.send_late_max_ms for r in results), default=0.0),
        },
        "processes": usage,
    }
    if lane != "manual":
        # Where the time after the end of speech goes: the server's endpointing
        # (speech_stopped), the turn it commits, the response it starts.
        level["end_of_speech_to"] = {
            key: stats(
                [v for r in results if (v := getattr(r, f"eos_{key}_ms")) is not None], 50, 95
            )
            for key in ("speech_stopped", "committed", "created")
        }
        if session is not None:
            audio_in = (session.get("audio") or {}).get("input") or {}
            level["turn_detection"] = audio_in.get("turn_detection", session.get("turn_detection"))
    if overhead:
        # Stage clocks at zero (the synthetic backend): every millisecond here is
        # the serving path's own, gateway + session + gRPC + Redis.
        level["overhead"] = {
            "commit_to_first_audio_ms": _p50_p99(first),
            "heartbeat_rtt_ms": _p50_p99(heartbeat),
            "event_gap_ms": _p50_p99(event_gaps),
        }
    level["samples"] = {
        "end_of_speech_to_first_audio_ms": eos_first,
        "commit_to_first_audio_ms": first,
        "heartbeat_rtt_ms": heartbeat,
        "audio_chunk_gap_max_ms": gaps,
        "audio_silence_max_ms": silent,
        "audio_first_join_silence_ms": joins,
    }
    level["turns"] = [{k: v for k, v in asdict(r).items() if k != "event_gaps_ms"} for r in results]
    return level


def _first_audio_by_turn(results: list[TurnResult]) -> dict[int, list[float]]:
    """End of speech -> first audio of each turn index's results, in turn order."""
    out: dict[int, list[float]] = {}
    for r in sorted(results, key=lambda r: r.turn):
        if r.eos_first_audio_ms is not None:
            out.setdefault(r.turn, []).append(r.eos_first_audio_ms)
    return out


def new_report(
    lane: str, session: dict[str, Any], questions: Sequence[Question], turns: int, **fields: Any
) -> dict[str, Any]:
    """The head of a load report, `levels` empty: what was run, where, on what audio."""
    return {
        **fields,
        "lane": lane,
        "session": session,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_before": [round(x, 2) for x in os.getloadavg()],
        },
        "turns_per_session": turns,
        "audio_ms_per_turn": [q.audio_ms for q in questions],
        # Where the end of speech is: the end of the last append holding speech.
        "speech_end_ms_per_turn": [q.speech_end_ms for q in questions],
        "levels": [],
    }


def _p50_p99(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "p50": round(float(np.percentile(values, 50)), 2),
        "p99": round(float(np.percentile(values, 99)), 2),
    }


def _fmt(s: dict[str, Any] | None, *keys: str) -> str:
    if not s:
        return "-"
    return "/".join(f"{s[k]:.0f}" if s[k] >= 10 else f"{s[k]:.1f}" for k in keys)


def print_table(backend: str, levels: list[dict[str, Any]], header: bool) -> None:
    """One line per level on stdout: latency, errors, CPU % and peak RSS per
    process (the services' when the run started them, else its own alone)."""
    names = service_names(levels)
    if header:
        print(
            f"{'backend':<10}{'lane':<13}{'sess':>5}{'open':>5}{'refused':>8}{'turns':>7}"
            f"  {'eos->audio p50/p95':<19}{'commit->audio p50/p95/p99':<26}"
            f"{'hb rtt p50/p99':<15}{'silence 1st/max p95':<20}{'gap max':>8}{'empty':>6}"
            f"{'errors':>7}{'mach%':>7}{'other%':>7}  CPU % mean/peak-1s, peak RSS MiB: "
            + " ".join(names)
        )
    for lv in levels:
        procs = lv["processes"]
        cpu = " ".join(
            f"{procs[p]['cpu_pct']:.0f}/{procs[p]['cpu_pct_peak']:.0f}%,{procs[p]['peak_rss_mib']:.0f}"
            if p in procs
            else "-"
            for p in names
        )
        gap = lv["audio_chunk_gap_max_ms"]
        machine = (procs.get("machine") or {}).get("cpu_pct")
        others = (procs.get("others") or {}).get("cpu_pct")
        print(
            f"{backend:<10}{lv.get('lane', 'manual'):<13}{lv['sessions']:>5}{lv['opened']:>5}"
            f"{sum(lv['refused'].values()):>8}{lv['turns_completed']:>7}"
            f"  {_fmt(lv['end_of_speech_to_first_audio_ms'], 'p50', 'p95'):<19}"
            f"{_fmt(lv['commit_to_first_audio_ms'], 'p50', 'p95', 'p99'):<26}"
            f"{_fmt(lv['heartbeat_rtt_ms'], 'p50', 'p99'):<15}"
            f"{_silences(lv):<20}"
            f"{(gap or {}).get('max', 0):>8.0f}{lv['transcripts']['empty']:>6}"
            f"{lv['errors']['count']:>7}"
            f"{_pct(machine):>7}{_pct(others):>7}  {cpu}",
            flush=True,
        )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def capacity(levels: list[dict[str, Any]], slo_ms: float) -> dict[str, Any]:
    """The largest level served in real time: every turn answered, no errors,
    first audio p95 within the SLO (from the commit in the manual lane, from
    the end of speech in the others). This is the number a worker's
    `capacity` setting should hold (the measurement behind it, not a guess)."""

    def first_audio(lv: dict[str, Any]) -> dict[str, Any]:
        manual = lv.get("lane", "manual") == "manual"
        key = "commit_to_first_audio_ms" if manual else "end_of_speech_to_first_audio_ms"
        return lv[key] or {}

    served = [
        lv["sessions"]
        for lv in levels
        if lv["turns_completed"] == lv["turns_expected"]
        and not lv["errors"]["count"]
        and first_audio(lv).get("p95", float("inf")) <= slo_ms
    ]
    return {"slo_ms": slo_ms, "sessions": max(served, default=0)}


def print_summary(report: dict[str, Any], out: Path | None = None) -> None:
    """The whole table, then barge-in, the lanes that did not hear the user, capacity."""
    backend = str(report.get("backend", "remote"))
    lane = str(report.get("lane", "manual"))
    print_table(backend, report["levels"], header=True)
    for lv in report["levels"]:
        busiest = busiest_line(lv)
        if busiest:
            print(f"busiest processes x{lv['sessions']}: {busiest}")
        by_turn = lv.get("end_of_speech_to_first_audio_ms_by_turn") or {}
        if len(by_turn) > 1:
            parts = [f"turn {t} {s['p50']:.0f}/{s['p95']:.0f}" for t, s in by_turn.items() if s]
            print(f"eos -> first audio p50/p95 by turn x{lv['sessions']}: {', '.join(parts)}")
    if "barge_in" in report:
        b = report["barge_in"]
        print(f"barge-in: {b['barge_in_ms']} audio stop: {b['audio_stop_ms']} {b.get('note', '')}")
    for lv in report["levels"]:
        heard = lv["transcripts"]
        if heard["empty"] or heard["missing"]:
            print(
                f"ERROR: {lane} x{lv['sessions']}: {heard['empty']} empty and "
                f"{heard['missing']} missing user transcripts in {lv['turns_expected']} turns: "
                "the lane did not hear the user",
                file=sys.stderr,
            )
    if "capacity" in report:
        c = report["capacity"]
        print(f"capacity: {c['sessions']} sessions within first-audio p95 <= {c['slo_ms']} ms")
    if out is not None:
        print(f"written to {out} and {out.with_suffix('.png')}")


def busiest_line(level: dict[str, Any]) -> str:
    """Each service's busiest process, CPU % of one core: a process whose one
    event loop is busy bounds the level, whatever the machine's other cores do
    (its other threads, onnxruntime's or torch's, may take it past 100)."""
    parts = []
    for service in service_names([level]):
        top = (level["processes"].get(service) or {}).get("busiest") or []
        if top:
            parts.append(f"{service} {top[0]['name']} {top[0]['cpu_pct']:.0f}%")
    return ", ".join(parts)


def _silences(level: dict[str, Any]) -> str:
    """p95 of the silence heard at the first join / anywhere in an answer."""
    first = (level.get("audio_first_join_silence_ms") or {}).get("p95")
    most = (level.get("audio_silence_max_ms") or {}).get("p95")
    if first is None or most is None:
        return "-"
    return f"{first:.0f}/{most:.0f}"


def plot(report: dict[str, Any], path: Path) -> None:
    """ECDFs per level: end of speech (and commit) -> first audio, heartbeat round
    trip, audio chunk gap max."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    panels = [
        ("end_of_speech_to_first_audio_ms", "end of speech -> first audio delta (ms)"),
        ("commit_to_first_audio_ms", "commit -> first audio delta (ms)"),
        ("heartbeat_rtt_ms", "heartbeat -> ack round trip (ms)"),
        ("audio_chunk_gap_max_ms", "largest gap between audio deltas, per response (ms)"),
    ]
    # A lane without a commit has no commit panel.
    panels = [p for p in panels if any(lv["samples"].get(p[0]) for lv in report["levels"])]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    for ax, (key, label) in zip(axes[0], panels, strict=True):
        for lv in report["levels"]:
            values = np.sort(np.asarray(lv["samples"].get(key, []), dtype=np.float64))
            if values.size == 0:
                continue
            ecdf = np.arange(1, values.size + 1) / values.size
            ax.step(np.maximum(values, 0.01), ecdf, where="post", label=f"{lv['sessions']}")
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of samples")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(title="sessions", fontsize=8)
    machine = report.get("machine") or {}
    fig.suptitle(
        f"Antiphon load, backend={report.get('backend', 'remote')}, "
        f"lane={report.get('lane', 'manual')}, voice={report.get('voice', 'piper')}, "
        f"{report['turns_per_session']} turns/session, {machine.get('cpus', '?')} CPUs"
        + (f", commit {report['commit']}" if report.get("commit") else "")
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
