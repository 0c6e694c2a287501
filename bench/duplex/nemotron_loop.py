"""The reference loop for Nemotron VoiceChat: NeMo's own streaming inference alone, B sessions.

    python -m bench.duplex.nemotron_loop --checkpoint random:9b --device cuda --batches 1,32,64

NeMo's `DuplexSTTStreamingInference.offline_inference` is what stage0's
`nemotron` backend is tested against token for token; this runs its own
steps, timed: `_init_inference` (perception over the whole input, once) and
then one `_step_inference` per 80 ms frame for B rows, each to a device
synchronize. Per frame it reports the LLM step (`lm_*`) and the step with
the perception's share of a frame added (`all_*`, what the worker's step
histogram times: it hears each frame as it comes). NeMo keeps no attention
window (each step sees the whole call so far), so `--context` does not apply;
only the listening half is here (stage1's EAR-TTS runs in its own worker).
Prints one JSON line per batch size as it finishes, as moshi_loop.py does.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from bench.duplex.sweep import device_clock, quantile, sweep
from bench.lib.args import ints


def build(checkpoint: str, device: str, dtype: str) -> Any:
    """NeMo's DuplexSTTModel from the checkpoint (random weights for random:<shape>)."""
    import torch

    from antiphon.common.nemotron import checkpoint as nemotron_checkpoint

    return nemotron_checkpoint.resolve(checkpoint).stt(device).to(getattr(torch, dtype))


def measure(stt: Any, batch: int, steps: int, warmup: int, device: str) -> dict[str, Any]:
    """`steps` frames of B rows after `warmup` unmeasured ones."""
    import torch

    cuda = device.startswith("cuda")
    sync = device_clock(device)
    rate = int(stt.cfg.get("source_sample_rate", 16_000))
    frames = warmup + steps + 1
    samples = frames * rate * 80 // 1000
    audio = torch.randn(batch, samples, device=device) * 0.1
    lens = torch.full((batch,), samples, device=device)
    inference = stt.streaming_inference
    lm: list[float] = []
    with torch.no_grad():
        a = sync()
        state = inference._init_inference(audio, lens, 0, None, None)
        ans, state = inference._step_zero(state)
        perception_ms = (sync() - a) * 1000
        for t in range(1, min(frames, state["T"])):
            b = sync()
            ans = inference._step_inference(t, state, ans)
            if t > warmup:
                lm.append((sync() - b) * 1000)
    per_frame = perception_ms / frames
    every = [x + per_frame for x in lm]
    row: dict[str, Any] = {"sessions": batch, "steps": len(lm)}
    row |= {"perception_ms_per_frame": round(per_frame, 2)}
    row |= {"lm_p50_ms": quantile(lm, 50), "lm_p99_ms": quantile(lm, 99)}
    row |= {"all_p50_ms": quantile(every, 50), "all_p99_ms": quantile(every, 99)}
    row["enc_lm_p99_ms"] = row["all_p99_ms"]
    row["all_max_ms"] = round(max(every), 2)
    row["gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1) if cuda else None
    return row


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.duplex.nemotron_loop", description=__doc__)
    ap.add_argument("--checkpoint", default="random:9b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batches", type=ints, default=[1])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch's intra-op threads")
    ap.add_argument(
        "--deadline-s", type=float, default=0.0, help="skip batches that would end after this"
    )
    args = ap.parse_args(argv)
    import torch

    started = time.monotonic()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    stt = build(args.checkpoint, args.device, args.dtype)
    built = {
        "built_s": round(time.monotonic() - started, 1),
        "llm_params_b": round(sum(p.numel() for p in stt.llm.parameters()) / 1e9, 3),
        "context_frames": None,
        "kv_cache": "model",
    }
    print(json.dumps(built), flush=True)
    sweep(
        args.batches,
        lambda batch: measure(stt, batch, args.steps, args.warmup, args.device),
        started=started,
        deadline_s=args.deadline_s,
    )


if __name__ == "__main__":
    main()
