"""The whole stack's capacity on one GPU, from bench.load's runs of it.

    python -m bench.recipes.voice_summary bench/results/voice-h200-1.5b-lanes.json ... \\
        --out bench/results/voice-h200.json

Each run (bench/recipes/voice_gpu.sh, one stack, one LLM shape, one lane) gives its
levels; this puts every level of the runs named in one table, a row per LLM,
turn detector and level, and finds each LLM and detector's
`capacity_at_slo`: the most sessions whose end of speech -> first audio p95
was under `--slo-ms` with every turn completed and no error. A level that
did not hold does not hide a larger one that did (runs differ, and a level
measured twice is listed twice); the capacity is the largest that held.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.lib.results import command_line, write_json

# bench/recipes/voice_gpu.sh's "same" shape is the embedded LLM's own (random weights).
EMBEDDED = "qwen2.5-coder-1.5b"


def llm_of(run: dict[str, Any]) -> str:
    """The LLM shape a run served: its dummy model folder's name."""
    name = Path(run.get("env", {}).get("ANTIPHON_LLM_MODEL", "")).name
    return EMBEDDED if name in ("same", "") else name


# The load issue 26 names: each session a turn every 8-12 s at its own phase.
# A level whose first turns started spread over at least this long had it;
# one spread over a single utterance (bench.load's default) was a burst.
SPREAD_LOAD_S = 8.0


def detector_of(run: dict[str, Any], level: dict[str, Any]) -> str:
    """server_vad, or semantic_vad with its eagerness (`auto` unless set), and
    Smart Turn's engine where the run named one over its profile's; then the
    layout and load where they differ from the first runs' (each a capacity
    of its own, see `layout_of`)."""
    lane = str(level.get("lane") or run.get("lane", ""))
    if lane != "semantic_vad":
        return lane + layout_of(run, level)
    detection = level.get("turn_detection") or {}
    engine = run.get("env", {}).get("ANTIPHON_TURN_ENGINE")
    engine_part = f"/{engine}" if engine else ""
    eagerness = detection.get("eagerness", "auto")
    return f"semantic_vad/{eagerness}{engine_part}{layout_of(run, level)}"


def layout_of(run: dict[str, Any], level: dict[str, Any]) -> str:
    """A level's layout and load, as tags: `+mps`, the stack's processes shared
    the card through CUDA MPS; `+spread`, the level had the issue's load
    (SPREAD_LOAD_S), not a burst; `+sessions2`, that many session replicas;
    `+vad_offload1`, the stage0 setting `vad_offload_at` set by the run."""
    tags = []
    if run.get("machine", {}).get("gpu_sharing") == "mps":
        tags.append("mps")
    if (level.get("start_spread_s") or 0.0) >= SPREAD_LOAD_S:
        tags.append("spread")
    if (replicas := run.get("session_replicas", 1)) > 1:
        tags.append(f"sessions{replicas}")
    if offload := run.get("env", {}).get("ANTIPHON_VAD_OFFLOAD_AT"):
        tags.append(f"vad_offload{offload}")
    return "".join(f"+{t}" for t in tags)


def _cpu(level: dict[str, Any]) -> dict[str, float]:
    return {
        service: stats["cpu_pct"]
        for service, stats in (level.get("processes") or {}).items()
        if isinstance(stats, dict) and "cpu_pct" in stats
    }


def row(source: str, run: dict[str, Any], level: dict[str, Any]) -> dict[str, Any]:
    first = level.get("end_of_speech_to_first_audio_ms") or {}
    stages = level.get("stages") or {}
    asr, tts = stages.get("stage0_asr") or {}, stages.get("stage1_first_audio") or {}
    return {
        "llm": llm_of(run),
        "detector": detector_of(run, level),
        "sessions": level["sessions"],
        "device": run.get("machine", {}).get("device"),
        "first_audio_ms_p50": first.get("p50"),
        "first_audio_ms_p95": first.get("p95"),
        "turns_completed": level.get("turns_completed", 0),
        "turns_expected": level.get("turns_expected", 0),
        "errors": (level.get("errors") or {}).get("count", 0),
        # Histogram buckets (the stages' metrics): "at most" the bucket's bound.
        "asr_ms_p50_at_most": asr.get("p50_ms_at_most"),
        "asr_ms_p95_at_most": asr.get("p95_ms_at_most"),
        "tts_first_audio_ms_p95_at_most": tts.get("p95_ms_at_most"),
        "tts_first_audio_ms_mean": tts.get("mean_ms"),
        "cpu_pct": _cpu(level),
        "file": source,
    }


def held(r: dict[str, Any], slo_ms: float) -> bool:
    p95 = r["first_audio_ms_p95"]
    return (
        p95 is not None
        and p95 < slo_ms
        and r["turns_expected"] > 0
        and r["turns_completed"] == r["turns_expected"]
        and r["errors"] == 0
    )


def summarize(paths: list[Path], slo_ms: float) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for path in paths:
        run = json.loads(path.read_text())
        rows.extend(row(path.name, run, level) for level in run.get("levels", []))
    rows.sort(key=lambda r: (r["llm"], r["detector"], r["sessions"]))
    capacity: dict[str, dict[str, int]] = {}
    for r in rows:
        r["held"] = held(r, slo_ms)
        best = capacity.setdefault(r["llm"], {}).setdefault(r["detector"], 0)
        if r["held"]:
            capacity[r["llm"]][r["detector"]] = max(best, r["sessions"])
    return {
        "bench": "voice_summary",
        "command": command_line(),
        "slo": {"first_audio_ms_p95_under": slo_ms, "every_turn_completed": True, "errors": 0},
        "capacity_at_slo": capacity,
        "levels": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.recipes.voice_summary", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("runs", type=Path, nargs="+", help="bench.load results of the stack")
    parser.add_argument("--slo-ms", type=float, default=1000.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    summary = summarize(args.runs, args.slo_ms)
    write_json(args.out, summary)
    print(json.dumps(summary["capacity_at_slo"], indent=2))


if __name__ == "__main__":
    main()
