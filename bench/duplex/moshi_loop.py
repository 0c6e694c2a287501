"""The reference duplex loop: moshi's own code alone, B sessions in lockstep.

    python -m bench.duplex.moshi_loop --checkpoint random:7b --device cuda --context 1500 \\
        --batches 1,16,32,64,96,128

Per 80 ms frame: Mimi encode of B frames of input, `LMGen.step` (text + audio
codebooks through the depformer, CUDA graphs as LMGen makes them), Mimi decode
of the frame's audio tokens, each phase timed to a device synchronize; what
../shared/gpu/probe_moshi.py measured for the issue. The model is built with
moshi's loaders from the checkpoint's config (random weights, the context in
frames given) and once for every batch size. Prints one JSON line per batch
size as it finishes (bench.duplex reads them; a run stopped at its limit
keeps those it printed).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from bench.duplex.sweep import device_clock, quantile, sweep
from bench.lib.args import ints


def build(
    checkpoint: str, device: str, dtype: str, context: int | None
) -> tuple[Any, Any, int | None]:
    """Mimi, the LM and its context (frames) through moshi's loaders, weights random."""
    import torch
    from moshi.models import loaders

    from antiphon.common import moshi_checkpoint

    ckpt = moshi_checkpoint.resolve(checkpoint)
    if not ckpt.random:
        raise SystemExit("the reference loop builds random weights: use random:7b or random:tiny")
    lm_kwargs = dict(ckpt.lm_config or loaders._lm_kwargs)
    if context:
        lm_kwargs["context"] = context
    lm = loaders.get_moshi_lm(None, lm_kwargs=lm_kwargs, device=device, dtype=getattr(torch, dtype))
    lm.eval()
    mimi = loaders.get_mimi(None, ckpt.mimi_config, device=device, num_codebooks=ckpt.num_codebooks)
    mimi.eval()
    return lm, mimi, lm_kwargs.get("context")


def measure(lm: Any, mimi: Any, batch: int, steps: int, warmup: int, device: str) -> dict[str, Any]:
    """`steps` frames of B rows after `warmup` unmeasured ones (CUDA graph capture)."""
    import torch
    from moshi.models.lm import LMGen

    cuda = device.startswith("cuda")
    sync = device_clock(device)
    gen = LMGen(lm, temp=0.8, temp_text=0.7)
    frame = torch.randn(batch, 1, mimi.frame_size, device=device) * 0.1
    times: dict[str, list[float]] = {"enc": [], "lm": [], "dec": [], "all": []}
    with torch.no_grad(), mimi.streaming(batch), gen.streaming(batch):
        for i in range(warmup + steps):
            a = sync()
            codes = mimi.encode(frame)
            b = sync()
            tokens = gen.step(codes)
            c = sync()
            if tokens is not None:
                mimi.decode(tokens[:, 1:])
            d = sync()
            if i >= warmup:
                for key, dt in (("enc", b - a), ("lm", c - b), ("dec", d - c), ("all", d - a)):
                    times[key].append(dt * 1000)
    row: dict[str, Any] = {"sessions": batch, "steps": steps}
    row |= {f"{k}_p50_ms": quantile(v, 50) for k, v in times.items()}
    row["all_p99_ms"] = quantile(times["all"], 99)
    # What the stage0 worker's step histogram times: encode + LM, no decode.
    enc_lm = [e + m for e, m in zip(times["enc"], times["lm"], strict=True)]
    row["enc_lm_p99_ms"] = quantile(enc_lm, 99)
    row["all_max_ms"] = round(max(times["all"]), 2)
    row["gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1) if cuda else None
    return row


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.duplex.moshi_loop", description=__doc__)
    ap.add_argument("--checkpoint", default="random:7b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--context", type=int, default=None, help="attention window, frames")
    ap.add_argument("--batches", type=ints, default=[1])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    ap.add_argument(
        "--kv-cache",
        choices=["model", "fp8"],
        default="model",
        help="the temporal transformer's KV cache: moshi's own, or stage0's float8 one",
    )
    ap.add_argument(
        "--deadline-s", type=float, default=0.0, help="skip batches that would end after this"
    )
    args = ap.parse_args(argv)
    import torch

    started = time.monotonic()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    lm, mimi, context = build(args.checkpoint, args.device, args.dtype, args.context)
    if args.kv_cache != "model":
        # The worker's cache in moshi's loop, so the ratio compares like with like.
        from antiphon.stage0.backends.moshi.kv_cache import install

        install(lm.transformer, args.kv_cache)
    built = {
        "built_s": round(time.monotonic() - started, 1),
        "lm_params_b": round(sum(p.numel() for p in lm.parameters()) / 1e9, 3),
        "context_frames": context,
        "kv_cache": args.kv_cache,
    }
    print(json.dumps(built), flush=True)
    sweep(
        args.batches,
        lambda batch: measure(lm, mimi, batch, args.steps, args.warmup, args.device),
        started=started,
        deadline_s=args.deadline_s,
    )


if __name__ == "__main__":
    main()
