"""The results file: written after every level, and printed as markdown (`--table`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.duplex.reference import ratios
from bench.duplex.unit_voice import first_audio
from bench.lib.results import write_json


def finish(result: dict[str, Any], out: Path) -> None:
    reference = result.get("reference", {}).get("levels", [])
    if not result.get("unit_ms"):
        result["ratio"] = ratios(result["levels"], reference, result["settings"]["capacity"])
    real = [lv for lv in result["levels"] if lv["real_time"]]
    result["max_real_time_sessions"] = max(lv["sessions"] for lv in real) if real else None
    if result.get("voice"):
        # The thinker's and its voice's real time both (bench/duplex/unit_voice.py).
        voiced = [lv["sessions"] for lv in real if lv["voice"]["real_time"]]
        result["max_real_time_sessions_with_voice"] = max(voiced) if voiced else None
    write_json(out, result)


# ------------------------------------------------------------------ table
def table(data: dict[str, Any]) -> str:
    if data.get("unit_ms"):
        return unit_table(data)
    ref = {r["sessions"]: r for r in data.get("reference", {}).get("levels", [])}
    ratio = {r["sessions"]: r["worker_p99_over_reference_p99"] for r in data.get("ratio", [])}
    context = data["context"] or data.get("reference", {}).get("context_frames") or "default"
    cache = data.get("kv_cache", "model")
    cache_note = "" if cache == "model" else f", {cache} KV cache"
    lines = [
        f"{data['device']}; {data.get('model', 'moshi')} {data['checkpoint']},"
        f" context {context} frames,"
        f" {data['dtype']}{cache_note}; window {data['settings']['window_s']} s.",
        "",
        "| sessions | step p50 / p99 ms | late | silence | audio gap p50 / p99 ms"
        " | GPU MiB | real time | reference p50 / p99 ms | p99 ratio |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | :---: | ---: | ---: |",
    ]
    for lv in data["levels"]:
        s, g, r = lv["worker_step_ms"], lv["audio_gap_ms"], ref.get(lv["sessions"], {})
        mem = lv["gpu_memory_mib"]
        used = sum(m for m in (mem["stage0"], mem["stage1"]) if m) or mem["device_peak"]
        lines.append(
            f"| {lv['sessions']} | {_n(s['p50'])} / {_n(s['p99'])} | {lv['late_frames']:.0f}"
            f" | {lv['silence_frames']:.0f} | {_n(g['p50'])} / {_n(g['p99'])} | {_n(used, 0)}"
            f" | {'yes' if lv['real_time'] else 'no'}"
            f" | {_n(r.get('all_p50_ms'))} / {_n(r.get('all_p99_ms'))}"
            f" | {_n(ratio.get(lv['sessions']), 2)} |"
        )
    for n in data.get("skipped_levels", []):
        lines.append(f"| {n} | skipped (budget) | | | | | | | |")
    return "\n".join(lines)


def unit_table(data: dict[str, Any]) -> str:
    """A unit model's levels (`--model minicpmo`): the thinker's columns, then its
    voice's where it ran (stage1)."""
    context = f"context {data['context']} tokens" if data["context"] else "default context"
    voiced = any("voice" in lv for lv in data["levels"])
    head = (
        "| sessions | frames | unit p50 / p99 ms | worker's unit p50 / p99 ms | answered"
        " | late | dropped ms | restarts | GPU MiB | real time |"
    )
    rule = "| ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |"
    if voiced:
        head += (
            " voice p50 / p99 / max ms | voice worker p50 / p99 ms | batch | first audio"
            " p50 / p99 ms | heard | audio s/s (spoken) | voice MiB | voice real time |"
        )
        rule += " ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |"
    lines = [
        f"{data['device']}; {data['model']} {data['checkpoint']}, {context},"
        f" {data['dtype']}; a unit every {data['unit_ms']} ms; window"
        f" {data['settings']['window_s']} s" + ("; with its voice (stage1)." if voiced else "."),
        "",
        head,
        rule,
    ]
    for lv in data["levels"]:
        u, w, mem = lv["unit_latency_ms"], lv["worker_unit_ms"], lv["gpu_memory_mib"]
        used = mem["stage0"] or mem["device_used"] or mem["device_peak"]
        line = (
            f"| {lv['sessions']} | {'yes' if lv['frames'] else 'no'}"
            f" | {_n(u['p50'])} / {_n(u['p99'])} | {_n(w['p50'])} / {_n(w['p99'])}"
            f" | {lv['units_answered']} / {lv['units_closed']} | {lv['late_units']:.0f}"
            f" | {lv['dropped_input_ms']:.0f} | {lv['context_restarts']:.0f} | {_n(used, 0)}"
            f" | {'yes' if lv['real_time'] else 'no'} |"
        )
        if voiced:
            line += _voice_cells(lv.get("voice"))
        lines.append(line)
    blank = " |" * (8 if voiced else 0)
    for n in data.get("skipped_levels", []):
        lines.append(f"| {n} | skipped (budget) | | | | | | | | |{blank}")
    return "\n".join(lines)


def _voice_cells(v: dict[str, Any] | None) -> str:
    if v is None:
        return " - |" * 8
    lat, w = v["latency_ms"], v["worker_unit_ms"]
    first, when = first_audio(v)
    return (
        f" {_n(lat['p50'])} / {_n(lat['p99'])} / {_n(lat['max'])}"
        f" | {_n(w['p50'])} / {_n(w['p99'])} | {_n(v['batch_units_mean'])}"
        f" | {_n(first['p50'])} / {_n(first['p99'])}{when}"
        f" | {v['units_heard']} / {v['units_spoken']}"
        f" | {_n(v['audio_s_per_session_s'], 2)} ({_n(v['spoken_share'], 2)})"
        f" | {_n(v['gpu_memory_mib'], 0)} | {'yes' if v['real_time'] else 'no'} |"
    )


def _n(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"
