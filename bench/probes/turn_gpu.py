"""Smart Turn batched on a GPU: windows per second, against Smart Turn as it comes.

    python -m bench.probes.turn_gpu --device cuda --out $OUT/turn-h200.json

stage0's `turn_engine: torch` path (turn_torch.py) answers B sessions'
end-of-turn windows in one call at every level of `--levels`, features
included: the clips go in as the worker's batcher hands them over (each
session's PCM16 utterance so far, of which the model hears the last 8 s).
Beside it, Smart Turn as it comes:
onnxruntime on one CPU thread with pipecat's numpy features, calls of at
most 8 windows (stage0's CPU worker, `turn_max_batch` 8).

The windows are the recorded questions (bench/fixtures/gpu_speech.npz: the GPU
machine has no voice), whole and broken off mid-sentence, cycled to B. Their
answers are compared with onnxruntime's: the largest logit difference, and
how many decisions at an eagerness's threshold differ. For scale, the same
for onnxruntime run node by node (its graph optimizations off) against
onnxruntime as stage0 runs it: the int8 graph's answers move with how its
requantizations round, and onnxruntime's two ways already differ.

Reported per level: a call's wall time (p50 of `--repeats`, after a
warm-up), windows per second, and that over as it comes. At 128 semantic_vad
sessions, each asking at its silence's first check and every 500 ms after,
a worker needs at most some 256 windows a second. Runs on the CPU too
(`--device cpu`), which is how the tests keep it working; only the GPU's
numbers are worth reporting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

from antiphon.stage0.assets import TurnAssets, locate_turn
from antiphon.stage0.backends.cascade.listening.turn import EAGERNESS, SmartTurn, TurnModel, window
from antiphon.stage0.backends.cascade.listening.turn_torch import TorchSmartTurn
from bench.lib.machine import torch_device_name
from bench.lib.questions import load_recorded
from bench.lib.results import write_json

# What stage0's CPU worker puts in one onnxruntime call (turn_max_batch).
CPU_BATCH = 8
# Each question whole, and cut at these fractions of its speech (mid-sentence).
CUTS = (1.0, 0.6, 0.4)
SILENCE_AFTER = b"\0\0" * (16000 // 5)  # the 200 ms a first check hears


def fixture_clips() -> list[bytes]:
    """The recorded questions (16 kHz) as stage0 asks about them: whole, and broken off."""
    return [
        pcm16[: int(len(pcm16) * cut) // 2 * 2] + SILENCE_AFTER
        for pcm16 in load_recorded()
        for cut in CUTS
    ]


def logit(p: np.ndarray) -> np.ndarray:
    """Probabilities as logits, clipped off 0 and 1 (where the model's export saturates)."""
    q = np.clip(p.astype(np.float64), 1e-6, 1 - 1e-6)
    return np.asarray(np.log(q / (1 - q)))


def difference(cpu: np.ndarray, measured: np.ndarray) -> dict[str, Any]:
    """Answers to the same windows against onnxruntime's; a decision is a
    window on either side of one eagerness's threshold (`auto` is `medium`'s)."""
    thresholds = sorted({level.threshold for level in EAGERNESS.values()})
    flips = sum(int(((cpu >= t) != (measured >= t)).sum()) for t in thresholds)
    return {
        "max_logit_difference": round(float(np.abs(logit(cpu) - logit(measured)).max()), 3),
        "max_abs_difference": round(float(np.abs(cpu - measured).max()), 4),
        "decisions_differing": f"{flips}/{len(cpu) * len(thresholds)}",
    }


def node_by_node(onnx_path: Path, model: SmartTurn, clips: list[bytes]) -> np.ndarray:
    """onnxruntime's answers with its graph optimizations (the fused int8 kernels) off."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(
        str(onnx_path), options, providers=["CPUExecutionProvider"]
    )
    (name,) = [i.name for i in session.get_inputs()]
    feats = np.stack([model.features(window(c)) for c in clips])
    return np.asarray(session.run(None, {name: feats})[0], dtype=np.float32).reshape(-1)


def agreement(assets: TurnAssets, cpu_model: SmartTurn, model: TurnModel) -> dict[str, Any]:
    clips = fixture_clips()
    cpu = cpu_model.predict(clips)
    return {
        "windows": len(clips),
        **difference(cpu, model.predict(clips)),
        "onnxruntime_node_by_node": difference(cpu, node_by_node(assets.onnx, cpu_model, clips)),
        "onnxruntime": [round(float(p), 4) for p in cpu],
    }


def as_it_comes(model: SmartTurn, windows: list[bytes]) -> dict[str, Any]:
    """onnxruntime on one thread, `CPU_BATCH` windows a call, all of `windows`."""
    model.predict(windows[:1])  # warm-up
    t0 = time.perf_counter()
    for i in range(0, len(windows), CPU_BATCH):
        model.predict(windows[i : i + CPU_BATCH])
    wall = time.perf_counter() - t0
    return {
        "windows": len(windows),
        "wall_s": round(wall, 3),
        "windows_per_s": round(len(windows) / wall, 1),
    }


def level_row(model: TurnModel, windows: list[bytes], repeats: int) -> dict[str, Any]:
    model.predict(windows)  # warm-up: these shapes (the allocator, cuDNN's choices)
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.predict(windows)  # its answers come back to the host: the device is done
        walls.append(time.perf_counter() - t0)
    p50 = statistics.median(walls)
    return {
        "windows": len(windows),
        "wall_ms_p50": round(p50 * 1000, 1),
        "windows_per_s": round(len(windows) / p50, 1),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    assets = locate_turn()
    fixtures = fixture_clips()
    cpu_model = SmartTurn(assets.onnx, assets.features, threads=1)
    model = TorchSmartTurn(assets.onnx, device=args.device)
    agrees = agreement(assets, cpu_model, model)
    print(json.dumps({"against_onnxruntime": agrees}), flush=True)
    cpu = as_it_comes(cpu_model, [fixtures[i % len(fixtures)] for i in range(args.cpu_windows)])
    print(json.dumps({"as_it_comes": cpu}), flush=True)
    levels: list[dict[str, Any]] = []
    for level in args.levels:
        row = level_row(model, [fixtures[i % len(fixtures)] for i in range(level)], args.repeats)
        row["over_as_it_comes"] = round(row["windows_per_s"] / cpu["windows_per_s"], 1)
        print(json.dumps(row), flush=True)
        levels.append(row)
        if args.out:
            write(args, cpu, levels, agrees)
    return {"as_it_comes": cpu, "levels": levels, "against_onnxruntime": agrees}


def write(
    args: argparse.Namespace,
    cpu: dict[str, Any],
    levels: list[dict[str, Any]],
    agrees: dict[str, Any],
) -> None:
    write_json(
        Path(args.out),
        {
            "bench": "turn_gpu",
            "device": torch_device_name(args.device),
            "model": locate_turn().onnx.name,
            "against_onnxruntime": agrees,
            "repeats": args.repeats,
            "as_it_comes": {
                "engine": f"onnxruntime CPU, 1 thread, numpy features, {CPU_BATCH} a call",
                **cpu,
            },
            "levels": levels,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.probes.turn_gpu", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--device", default="cuda", help="torch device (cpu works, slowly)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 64, 128, 256])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cpu-windows", type=int, default=32, help="as it comes: windows run")
    parser.add_argument("--out", default="", help="JSON results file")
    measure(parser.parse_args())


if __name__ == "__main__":
    main()
