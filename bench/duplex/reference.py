"""The reference loop alone (bench/duplex/moshi_loop.py, or nemotron_loop.py, in a process
of its own), and the workers' step over it."""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.duplex.workers import MODELS, worker_env
from bench.lib.machine import now
from bench.lib.results import REPO


def run_reference(args: argparse.Namespace, result: dict[str, Any], deadline: float) -> None:
    """The model's reference loop in a process of its own (its GPU memory is freed
    before the workers start); its JSON lines as it prints them."""
    steps = args.reference_steps or (100 if args.device.startswith("cuda") else 8)
    loop = MODELS[args.model].reference
    assert loop is not None, f"{args.model} has no reference loop"
    cmd = [
        sys.executable,
        "-m",
        loop,
        f"--checkpoint={args.checkpoint}",
        f"--device={args.device}",
        f"--dtype={args.dtype}",
        f"--batches={','.join(map(str, args.levels))}",
        f"--steps={steps}",
        f"--warmup={10 if args.device.startswith('cuda') else 2}",
        f"--threads={args.threads}",
    ]
    if MODELS[args.model].moshi_settings:
        cmd.append(f"--kv-cache={args.kv_cache}")
    if args.context and MODELS[args.model].moshi_settings:
        cmd.append(f"--context={args.context}")
    timeout = args.reference_timeout_s
    if args.budget_s:
        timeout = min(timeout, max(10.0, (deadline - now()) * args.reference_share))
        cmd.append(f"--deadline-s={timeout - 5:.0f}")
    ref: dict[str, Any] = {"levels": [], "steps": steps}
    result["reference"] = ref
    log = args.out.with_name(args.out.stem + "-reference.log")
    env = worker_env(args, Path("-")) | {"ANTIPHON_PROFILE": ""}
    with log.open("w") as out:
        try:
            done = subprocess.run(
                cmd,
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=out,
                text=True,
                timeout=timeout,
            )
            text = done.stdout
            if done.returncode:
                ref["error"] = f"exited {done.returncode} (see {log.name})"
        except subprocess.TimeoutExpired as exc:
            text = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            ref["error"] = f"stopped at {timeout:.0f}s"
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        with contextlib.suppress(json.JSONDecodeError):
            row = json.loads(line)
            if "built_s" in row:
                ref |= row
            elif "error" in row or "skipped" in row:
                ref.setdefault("not_measured", []).append(row)
            else:
                ref["levels"].append(row)
    print(f"reference: {len(ref['levels'])} batch sizes ({log.name})", flush=True)


def ratios(
    levels: list[dict[str, Any]], reference: list[dict[str, Any]], capacity: int
) -> list[dict[str, Any]]:
    """Worker step p99 over the reference's: its whole frame at the same N (the
    issue's ratio), its encode + LM only (what the worker's step times; stage1
    decodes), and its whole frame at the capacity (the worker steps every row,
    bound or not)."""
    by_n = {r["sessions"]: r for r in reference}
    full = by_n.get(capacity)

    def ratio(a: float, b: float | None) -> float | None:
        return round(a / b, 2) if b else None

    out = []
    for lv in levels:
        ref, p99 = by_n.get(lv["sessions"]), lv["worker_step_ms"]["p99"]
        if not p99 or not (ref or full):
            continue
        out.append(
            {
                "sessions": lv["sessions"],
                "worker_p99_over_reference_p99": ratio(p99, (ref or {}).get("all_p99_ms")),
                "over_reference_enc_lm_p99": ratio(p99, (ref or {}).get("enc_lm_p99_ms")),
                "over_reference_at_capacity_p99": ratio(p99, (full or {}).get("all_p99_ms")),
            }
        )
    return out
