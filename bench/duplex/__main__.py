"""`python -m bench.duplex`: see the package's docstring (bench/duplex/__init__.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench.duplex
from bench.duplex.clients import FRAME_S
from bench.duplex.levels import GAP_P99_MS, STEP_P99_MS, run_worker_levels
from bench.duplex.reference import run_reference
from bench.duplex.report import finish, table
from bench.duplex.unit_levels import real_time_definition, run_unit_levels
from bench.duplex.units import probe_checkpoint
from bench.duplex.workers import (
    MODELS,
    STAGE0,
    STAGE1,
    stage1_backend,
    unknown_settings,
    worker_profile,
)
from bench.lib.args import ints
from bench.lib.machine import device_name, now, version
from bench.lib.results import RESULTS, command_line

# vLLM's share of the card in MiniCPM-o's thinker worker when its voice shares the
# card (the worker's own default, 0.85, leaves the voice too little).
VOICED_STAGE0_GPU_MEMORY = 0.55


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.duplex",
        description=bench.duplex.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="moshi",
        help="the architecture: its stage0 and stage1 backends and its reference loop"
        " (minicpmo: the thinker and its voice, no reference)",
    )
    ap.add_argument(
        "--checkpoint",
        default=None,
        help="duplex_checkpoint of both workers (default: random:7b for moshi, random:9b"
        " for nemotron, random:4.5 for minicpmo)",
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--context", type=int, default=None, help="attention window in frames")
    ap.add_argument(
        "--kv-cache",
        choices=["model", "fp8"],
        default="model",
        help="the temporal transformer's KV cache (duplex_kv_cache), worker and reference",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads (workers, reference)")
    ap.add_argument(
        "--front-ends",
        type=int,
        default=1,
        help="duplex_front_ends of the stage0 worker: sessions spread over them",
    )
    ap.add_argument(
        "--stage1-front-ends",
        type=int,
        default=1,
        help="duplex_front_ends of the stage1 worker: sessions spread over them",
    )
    ap.add_argument("--levels", type=ints, default=[1, 16, 32, 64, 96, 128])
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--window-s", type=float, default=10.0)
    ap.add_argument("--budget-s", type=float, default=0.0, help="skip what would end after it")
    ap.add_argument("--client-procs", type=int, default=8)
    ap.add_argument("--sessions-per-proc", type=int, default=16)
    ap.add_argument("--startup-timeout", type=float, default=420.0)
    ap.add_argument("--reference-steps", type=int, default=0, help="default: 100 cuda, 8 cpu")
    ap.add_argument("--reference-timeout-s", type=float, default=240.0)
    ap.add_argument(
        "--reference-share", type=float, default=0.3, help="of the budget, the reference's"
    )
    ap.add_argument("--no-reference", dest="reference", action="store_false")
    ap.add_argument("--torch-compile", action="store_true", help="let moshi torch.compile")
    ap.add_argument(
        "--frames",
        action="store_true",
        help="minicpmo: a small JPEG camera frame on the append that closes each unit",
    )
    ap.add_argument(
        "--prime-sessions",
        type=int,
        default=1,
        help="minicpmo: sessions of the unmeasured level before the first (on a GPU;"
        " on a CPU when above 1)",
    )
    ap.add_argument(
        "--frames-at",
        type=ints,
        default=[],
        help="minicpmo: levels run again with --frames' camera frame, each right after"
        " the plain level of its size",
    )
    ap.add_argument(
        "--no-voice",
        dest="voice",
        action="store_false",
        help="minicpmo: the thinker (stage0) alone, no stage1 worker voicing its units"
        " (as its first results were made)",
    )
    ap.add_argument(
        "--stage0-gpu-memory",
        type=float,
        default=None,
        help="minicpmo: vLLM's share of the card in the thinker's worker"
        " (llm_gpu_memory_utilization; default 0.55 with the voice beside it on the card,"
        " the worker's own 0.85 under --no-voice)",
    )
    ap.add_argument("--stage0-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--stage1-set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--log-level", default="WARNING")
    ap.add_argument(
        "--out", type=Path, help="default: bench/results/duplex-h200.json (cuda), duplex-cpu.json"
    )
    ap.add_argument("--check", action="store_true", help="imports and settings only")
    ap.add_argument("--table", type=Path, help="print a results file as a markdown table")
    args = ap.parse_args(argv)
    args.levels = sorted(set(args.levels))
    model = MODELS[args.model]
    args.checkpoint = args.checkpoint or model.checkpoint
    if not model.moshi_settings and (args.kv_cache != "model" or args.front_ends != 1):
        ap.error(f"--kv-cache and --front-ends are the Moshi architecture's, not {args.model}'s")
    if (args.frames or args.frames_at) and not model.unit_ms:
        ap.error("--frames is for a model that decides once a unit (minicpmo)")
    if not args.voice and not model.unit_ms:
        ap.error(f"--no-voice is minicpmo's: {args.model} needs its stage1 worker")
    if args.stage0_gpu_memory is not None and not model.unit_ms:
        ap.error("--stage0-gpu-memory is minicpmo's (vLLM's share of the card)")
    if model.unit_ms and args.voice and args.stage0_gpu_memory is None:
        args.stage0_gpu_memory = VOICED_STAGE0_GPU_MEMORY
    if model.reference is None:
        args.reference = False
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    if args.out is None:
        prefix = "minicpmo" if model.unit_ms else "duplex"
        name = f"{prefix}-h200.json" if args.device.startswith("cuda") else f"{prefix}-cpu.json"
        args.out = RESULTS / name
    args.out = args.out.resolve()
    return args


def check(args: argparse.Namespace) -> dict[str, Any]:
    """What the run needs: the workers' imports, the model's code, and the settings they
    declare; for minicpmo, its checkpoint as vLLM's processor reads it."""
    report: dict[str, Any] = {"device": device_name(), "python": sys.version.split()[0]}
    model = MODELS[args.model]
    voiced = stage1_backend(args) is not None
    stages = (STAGE0[0], STAGE1[0]) if voiced else (STAGE0[0],)
    modules = [m for m in model.modules if voiced or not m.startswith("antiphon.stage1.")]
    for module in (*stages, *modules):
        try:
            __import__(module)
            report[module] = "ok"
        except Exception as exc:
            report[module] = f"{type(exc).__name__}: {exc}"
    if voiced and model.unit_ms:
        report |= check_token2wav()
    with contextlib.suppress(ImportError):
        import torch

        report["cuda_devices"] = torch.cuda.device_count()
    report["unknown_settings"] = unknown_settings(
        worker_profile(
            args, dict.fromkeys(("stage0", "stage1", "stage0_metrics", "stage1_metrics"), 0)
        )
    )
    report["versions"] = {d: version(d) for d in ("torch", "moshi", "grpcio", "protobuf")}
    if model.unit_ms:
        report["versions"] |= {d: version(d) for d in ("vllm", "transformers")}
        try:
            report["checkpoint"] = probe_checkpoint(args.checkpoint)
        except Exception as exc:
            report["checkpoint"] = f"{type(exc).__name__}: {exc}"
    return report


# The stepaudio2-minicpmo modules MiniCPM-o's token2wav builds (the flow.yaml's classes
# and HiFT), loaded as the voice loads them, without the package's `__init__`.
TOKEN2WAV_MODULES = (
    "cosyvoice2.flow.flow",
    "cosyvoice2.flow.flow_matching",
    "cosyvoice2.flow.decoder_dit",
    "cosyvoice2.transformer.upsample_encoder_v2",
    "flashcosyvoice.modules.hifigan",
)


def check_token2wav() -> dict[str, str]:
    """The voice's token2wav modules and what they import (einops, scipy, onnxruntime)."""
    out = {}
    for name in TOKEN2WAV_MODULES:
        try:
            from antiphon.common.minicpmo import stepaudio

            stepaudio.module(name)
            out[f"stepaudio2.{name}"] = "ok"
        except Exception as exc:
            out[f"stepaudio2.{name}"] = f"{type(exc).__name__}: {exc}"
    return out


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    if args.check:
        print(json.dumps(check(args), indent=2))
        return
    started = now()
    deadline = started + args.budget_s if args.budget_s else math.inf
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model = MODELS[args.model]
    result: dict[str, Any] = {
        "device": device_name(),
        "date": time.strftime("%Y-%m-%d"),
        "model": args.model,
        "checkpoint": args.checkpoint,
        "context": args.context,
        "kv_cache": args.kv_cache,
        "dtype": args.dtype,
        "torch_device": args.device,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "table", "check")}
        | {
            "capacity": max([*args.levels, *args.frames_at, args.prime_sessions]),
            "frame_ms": FRAME_S * 1000,
        },
        "versions": {d: version(d) for d in ("torch", "moshi", "grpcio", "numpy")},
        "real_time_definition": f"worker step p99 < {STEP_P99_MS:.0f} ms (its histogram over"
        f" the window), no late frame, audio gap p99 < {GAP_P99_MS:.0f} ms (client side, every"
        " session), every session streaming and no error",
        "gpu_memory": "workers: nvidia-smi's used MiB per worker process at the window's end"
        " (null where its pids are not the container's) and the device's peak during the level;"
        " reference: torch's max_memory_allocated",
        "levels": [],
        "skipped_levels": [],
    }
    if model.unit_ms:
        voiced = stage1_backend(args) is not None
        result |= {
            "unit_ms": model.unit_ms,
            "voice": voiced,
            "versions": result["versions"] | {d: version(d) for d in ("vllm", "transformers")},
            "real_time_definition": real_time_definition(voiced),
            "gpu_memory": "stage0: nvidia-smi's used MiB of the worker's process tree (vLLM's"
            " engine core is a child; null where nvidia-smi names none of its pids) at the"
            " window's end; device_used then, device_peak during the level. vLLM takes its"
            " share of the card (llm_gpu_memory_utilization) at start, weights, activations"
            " and KV cache, whatever the level; voice.gpu_memory_mib: the stage1 worker's"
            " process at the window's end",
            "command": command_line(),
            "note": "the thinker (stage0) and its voice (stage1: talker and token2wav, every"
            " session's frames forwarded as the session service does, bench/duplex/"
            "unit_voice.py); no reference loop"
            if voiced
            else "stage0 alone (--no-voice): no stage1 (talker and token2wav) voices its"
            " frames, and no reference loop",
        }
    if args.reference:
        run_reference(args, result, deadline)
        finish(result, args.out)
    try:
        if model.unit_ms:
            run_unit_levels(args, result, deadline)
        else:
            run_worker_levels(args, result, deadline)
    finally:
        result["wall_s"] = round(now() - started, 1)
        finish(result, args.out)
    print(table(result))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
