"""Batched Whisper on a GPU: utterances per second, against Whisper as it comes.

    python -m bench.probes.asr_gpu --device cuda --shape large-v3-turbo --out $OUT/asr-h200.json

stage0's torch Whisper (services/stage0/antiphon/stage0/backends/cascade/asr/whisper_torch.py),
random weights of the chosen shape (the compute of the real model), hears B
utterances of `--seconds` of audio at once, each decoding `--tokens` tokens
(the end of text is never chosen, so every row decodes the same count), at
every level of `--levels`. Two ways, in the same run on the same engine:

- `speech`: what stage0 does: the encoder over the audio plus Whisper's 4 s
  of silence, padded to the batch's longest, features on the device;
- `window`: Whisper as it comes (faster-whisper, vLLM's Whisper): every
  utterance padded to the 30 s window, ten times the encoder's work for a
  3 s question.

With `--graphs`, the decode steps replay as CUDA graphs where a batch fits
their buffers (stage0's `asr_cuda_graphs`, whisper_graphs.py: up to 32 rows
and 1,000 encoded frames, so `speech` up to 32 utterances; the 30 s window
never fits); run once with and once without for the ratio.

Reported per level: the batch's wall time (p50 of `--repeats`, after a
warm-up), utterances per second, and speech's gain over the window. Runs on
the CPU too (`--device cpu`, a small shape), which is how the tests keep it
working; only the GPU's numbers are worth reporting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from antiphon.stage0.backends.cascade.asr.asr_text import MAX_FRAMES, PAD_S, SAMPLE_RATE
from antiphon.stage0.backends.cascade.asr.whisper_graphs import DecodeGraphs
from antiphon.stage0.backends.cascade.asr.whisper_torch import HOP, TorchWhisper
from antiphon.stage0.backends.cascade.asr.whisper_weights import (
    LARGE_V3_TURBO,
    Shape,
    Tokens,
    random_weights,
)
from bench.lib.machine import torch_device_name
from bench.lib.results import write_json

SHAPES = {
    "large-v3-turbo": LARGE_V3_TURBO,
    # The shipped Whisper base's shape.
    "base": Shape(n_mels=80, width=512, heads=8, encoder_layers=6, decoder_layers=6, vocab=51865),
    "tiny-test": Shape(
        n_mels=80, width=64, heads=2, encoder_layers=2, decoder_layers=2, vocab=51865
    ),
}
END = 50257
# Whisper's prompt: start of transcript, English, transcribe, no timestamps.
PROMPT = [50258, 50259, 50360, 50364]


def engine(shape: Shape, device: str) -> TorchWhisper:
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    tokens = Tokens(
        prompt=PROMPT, end=END, blank=220, no_speech=None, suppress=[END], decode=lambda _t: ""
    )
    return TorchWhisper(random_weights(shape, device, dtype), tokens, device=device)


def clips(count: int, seconds: float) -> list[np.ndarray]:
    """Speech-loud noise of `seconds` each (random weights hear nothing anyway)."""
    rng = np.random.default_rng(0)
    return [
        (rng.standard_normal(int(seconds * SAMPLE_RATE)) * 0.1).astype(np.float32)
        for _ in range(count)
    ]


def run_batch(model: TorchWhisper, audio: list[np.ndarray], tokens: int, window: bool) -> float:
    """One batch's wall time (s), features to the last token."""
    sync = torch.cuda.synchronize if model.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        features = model.features(audio)
        if window:
            features = torch.nn.functional.pad(features, (0, MAX_FRAMES - features.shape[-1]))
        model.decode(model.encode(features), [tokens] * len(audio))
    sync()
    return time.perf_counter() - t0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    shape = SHAPES[args.shape]
    model = engine(shape, args.device)
    if args.graphs:
        model.graphs = DecodeGraphs(model, capture=args.device.startswith("cuda"))
    levels: list[dict[str, Any]] = []
    for batch in args.levels:
        audio = clips(batch, args.seconds)
        row: dict[str, Any] = {"batch": batch}
        for way in ("speech", "window"):
            run_batch(model, audio, args.tokens, way == "window")  # warm-up
            times = [
                run_batch(model, audio, args.tokens, way == "window") for _ in range(args.repeats)
            ]
            p50 = statistics.median(times)
            row[way] = {
                "batch_ms_p50": round(p50 * 1000, 1),
                "utterances_per_s": round(batch / p50, 1),
            }
        row["speech_over_window"] = round(
            row["speech"]["utterances_per_s"] / row["window"]["utterances_per_s"], 2
        )
        print(json.dumps(row), flush=True)
        levels.append(row)
        if args.out:
            write(args, shape, levels)
    return {"levels": levels}


def write(args: argparse.Namespace, shape: Shape, levels: list[dict[str, Any]]) -> None:
    encoded_s = args.seconds + PAD_S
    write_json(
        Path(args.out),
        {
            "bench": "asr_gpu",
            "device": torch_device_name(args.device),
            "shape": args.shape,
            "shape_dims": vars(shape),
            "weights": "random",
            "dtype": "float16" if args.device.startswith("cuda") else "float32",
            "utterance_s": args.seconds,
            "tokens_each": args.tokens,
            "encoder_frames": {
                "speech": int(encoded_s * SAMPLE_RATE / HOP),
                "window": MAX_FRAMES,
            },
            "repeats": args.repeats,
            "cuda_graphs": args.graphs,
            "levels": levels,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="large-v3-turbo")
    parser.add_argument(
        "--levels", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64, 128, 256]
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--graphs", action="store_true", help="replay decode steps as CUDA graphs")
    parser.add_argument("--out", default="")
    measure(parser.parse_args())


if __name__ == "__main__":
    main()
