"""Batched Piper on a GPU: clauses per second, against Piper as it comes.

    python -m bench.probes.tts_gpu --device cuda --voice VOICE.onnx --out $OUT/tts-h200.json

stage1's `tts_engine: torch` path (services/common/antiphon/common/onnx/torch_graph.py,
voice_batch.py) voices B clauses at once at every level of `--levels`: B
threads call the batched graph together, as the synthesis threads of B
sessions do, and the batcher runs them in batches of at most `--max-batch`.
The clauses are the shipped voice's phoneme ids of answer clauses as stage1
cuts them (bench/fixtures/tts_clauses.json; `--make-clauses` writes it again, with
Piper installed), cycled to B, and the voice's own noise scales.

Reported per level: the wall time until the last clause is voiced (p50 of
`--repeats`, after a warm-up), a clause's own wait from its call to its audio
(p50/p95 over the level's calls), clauses per second, and audio seconds per
wall second (`x_real_time`: the sessions it keeps talking without a pause).
Beside it, Piper as it comes: onnxruntime on the CPU, one thread, one clause
after another (stage1's CPU worker). Runs on the CPU too (`--device cpu`),
which is how the tests keep it working; only the GPU's numbers are worth
reporting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import torch

from antiphon.common.onnx.torch_graph import TorchGraph
from antiphon.stage1.backends.piper.voice_batch import BatchedVoiceGraph, VoiceGraph, with_durations
from antiphon.stage1.backends.piper.voice_graphs import GraphedVoice
from bench.lib.machine import torch_device_name
from bench.lib.results import write_json

CLAUSES = Path(__file__).parents[1] / "fixtures" / "tts_clauses.json"
# The answer clauses: a first few words (stage1's first_clause_words), then
# whole clauses and sentences.
TEXTS = [
    "Sure,",
    "The store opens at nine in the morning,",
    "and it closes at five.",
    "I can book a table for two tonight.",
    "Would you like that?",
    "Of course.",
    "Your order number is four one two seven, and it ships tomorrow.",
    "Let me check that for you.",
]


def make_clauses(voice_onnx: Path) -> None:
    from piper import PiperVoice

    voice = PiperVoice.load(voice_onnx)
    clauses = [
        {"text": text, "ids": voice.phonemes_to_ids(phonemes)}
        for text in TEXTS
        for phonemes in voice.phonemize(text)
        if phonemes
    ]
    config = voice.config
    CLAUSES.write_text(
        json.dumps(
            {
                "sample_rate": config.sample_rate,
                "hop": config.hop_length,
                "scales": [config.noise_scale, config.length_scale, config.noise_w_scale],
                "clauses": clauses,
            }
        )
        + "\n"
    )


def _feeds(ids: list[int], scales: list[float]) -> dict[str, np.ndarray]:
    return {
        "input": np.array([ids], dtype=np.int64),
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        "scales": np.array(scales, dtype=np.float32),
    }


def voice_at_once(
    voice: BatchedVoiceGraph, clauses: list[list[int]], scales: list[float]
) -> tuple[float, list[float], int]:
    """All `clauses` called at once from threads of their own: the wall time
    (the first call's start to the last one's end), each call's wait (s) and
    the samples voiced."""
    spans = [(0.0, 0.0)] * len(clauses)
    samples = [0] * len(clauses)
    go = threading.Barrier(len(clauses))

    def call(i: int) -> None:
        go.wait()
        t0 = time.perf_counter()
        audio = voice.run(None, _feeds(clauses[i], scales))[0]
        spans[i] = (t0, time.perf_counter())
        samples[i] = audio.size

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(clauses))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = max(end for _s, end in spans) - min(start for start, _e in spans)
    return wall, [end - start for start, end in spans], sum(samples)


def as_it_comes(
    voice_onnx: Path, clauses: list[list[int]], scales: list[float]
) -> tuple[onnxruntime.InferenceSession, dict[str, Any]]:
    """onnxruntime on the CPU, one thread, the clauses one after another."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(voice_onnx), options, providers=["CPUExecutionProvider"]
    )
    session.run(None, _feeds(clauses[0], scales))  # warm-up
    t0 = time.perf_counter()
    samples = sum(session.run(None, _feeds(ids, scales))[0].size for ids in clauses)
    wall = time.perf_counter() - t0
    return session, {
        "wall_s": round(wall, 3),
        "clauses_per_s": round(len(clauses) / wall, 1),
        "samples": samples,
    }


def agreement(
    session: onnxruntime.InferenceSession,
    graph: VoiceGraph,
    clauses: list[list[int]],
    hop: int,
) -> dict[str, Any]:
    """How far the engine measured is from onnxruntime, noise off: over the
    clauses whose phoneme durations came out the same (one rounded the other
    way shifts all that follows: no sample-wise comparison then), the largest
    sample difference and the signal-to-noise ratio (dB; above ~40 the two
    sound alike)."""
    signal = error = largest = 0.0
    same = 0
    for ids in clauses:
        feeds = _feeds(ids, [0.0, 1.0, 0.0])
        want = session.run(None, feeds)[0]
        audio, durations = graph.run(feeds)[:2]
        # A padded run's audio runs on past the sentence: cut it where its
        # durations end, as voice_batch.py does.
        got = audio[..., : int(durations.sum().item()) * hop].float().cpu().numpy()
        if got.shape != want.shape:
            continue
        same += 1
        signal += float((want**2).sum())
        error += float(((got - want) ** 2).sum())
        largest = max(largest, float(np.abs(got - want).max()))
    snr = 10 * float(np.log10(signal / max(error, 1e-12))) if same else float("nan")
    return {
        "same_durations": f"{same}/{len(clauses)}",
        "max_abs_difference": round(largest, 5),
        "snr_db": round(snr, 1),
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    spec = json.loads(CLAUSES.read_text())
    ids = [c["ids"] for c in spec["clauses"]]
    scales, rate = spec["scales"], spec["sample_rate"]
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    model = with_durations(onnx.load(args.voice))
    nodes = TorchGraph(model, device=args.device, half=args.half)
    graph: VoiceGraph = GraphedVoice(nodes, capture=True) if args.graphs else nodes
    sizes: list[int] = []
    voice = BatchedVoiceGraph(
        graph, hop=spec["hop"], max_batch=args.max_batch, observe_batch=sizes.append
    )
    session, cpu = as_it_comes(Path(args.voice), ids, scales)
    cpu["x_real_time"] = round(cpu.pop("samples") / rate / cpu["wall_s"], 1)
    agrees = agreement(session, graph, ids, spec["hop"])
    print(json.dumps({"against_onnxruntime": agrees}), flush=True)
    print(json.dumps({"as_it_comes": cpu}), flush=True)
    levels: list[dict[str, Any]] = []
    try:
        for level in args.levels:
            clauses = [ids[i % len(ids)] for i in range(level)]
            voice_at_once(voice, clauses, scales)  # warm-up (the allocator, cuDNN's choices)
            sync()
            walls, waits, samples = [], [], 0
            sizes.clear()
            for _ in range(args.repeats):
                wall, level_waits, samples = voice_at_once(voice, clauses, scales)
                walls.append(wall)
                waits.extend(level_waits)
            p50 = statistics.median(walls)
            row = {
                "clauses": level,
                "wall_ms_p50": round(p50 * 1000, 1),
                "wait_ms_p50": round(float(np.percentile(waits, 50)) * 1000, 1),
                "wait_ms_p95": round(float(np.percentile(waits, 95)) * 1000, 1),
                "clauses_per_s": round(level / p50, 1),
                "x_real_time": round(samples / rate / p50, 1),
                "batches_per_call": round(len(sizes) / args.repeats, 1),
            }
            row["over_as_it_comes"] = round(row["clauses_per_s"] / cpu["clauses_per_s"], 1)
            print(json.dumps(row), flush=True)
            levels.append(row)
            if args.out:
                write(args, spec, cpu, levels, agrees)
    finally:
        voice.close()
    return {"as_it_comes": cpu, "levels": levels}


def profile(args: argparse.Namespace) -> None:
    """Where one batch's time goes: torch's profile, busiest operators first."""
    spec = json.loads(CLAUSES.read_text())
    ids = [c["ids"] for c in spec["clauses"]]
    graph = TorchGraph(with_durations(onnx.load(args.voice)), device=args.device, half=args.half)
    batch = [ids[i % len(ids)] for i in range(args.profile)]
    length = max(map(len, batch))
    feeds: dict[str, np.ndarray] = {
        "input": np.array([row + [0] * (length - len(row)) for row in batch], dtype=np.int64),
        "input_lengths": np.array([len(row) for row in batch], dtype=np.int64),
        "scales": np.array(spec["scales"], dtype=np.float32),
    }
    for _ in range(2):
        graph.run(feeds)  # warm-up: these very shapes
    with torch.profiler.profile() as prof:
        graph.run(feeds)
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))


def write(
    args: argparse.Namespace,
    spec: dict[str, Any],
    cpu: dict[str, Any],
    levels: list[dict[str, Any]],
    agrees: dict[str, Any],
) -> None:
    write_json(
        Path(args.out),
        {
            "bench": "tts_gpu",
            "device": torch_device_name(args.device),
            "voice": Path(args.voice).name,
            "dtype": "float16 autocast" if args.half else "float32",
            "cuda_graphs": args.graphs,
            # The engine's audio against onnxruntime's, noise off.
            "against_onnxruntime": agrees,
            "cudnn": torch.backends.cudnn.enabled,
            "max_batch": args.max_batch,
            "clause_phonemes": [len(c["ids"]) for c in spec["clauses"]],
            "repeats": args.repeats,
            "as_it_comes": {"engine": "onnxruntime CPU, 1 thread, one at a time", **cpu},
            "levels": levels,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--voice", default="", help="the voice's .onnx (default: the shipped one)")
    parser.add_argument(
        "--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64, 128, 256]
    )
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--half", action="store_true", help="float16 autocast (TorchGraph half)")
    parser.add_argument(
        "--graphs", action="store_true", help="replay the network as CUDA graphs (GraphedVoice)"
    )
    parser.add_argument(
        "--no-cudnn", action="store_true", help="torch's own convolutions instead of cuDNN's"
    )
    parser.add_argument(
        "--profile", type=int, default=0, help="print torch's profile of one batch of N, then stop"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="")
    parser.add_argument("--make-clauses", action="store_true", help="write tts_clauses.json")
    args = parser.parse_args()
    if not args.voice:
        from antiphon.stage1.backends.piper.assets import locate

        args.voice = str(locate().voice_onnx)
    if args.make_clauses:
        make_clauses(Path(args.voice))
        return
    if args.no_cudnn:
        torch.backends.cudnn.enabled = False
    if args.profile:
        profile(args)
        return
    measure(args)


if __name__ == "__main__":
    main()
