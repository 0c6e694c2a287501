"""One layer's read of the duplex KV window on a GPU: the ways against the
bandwidth floor.

    python -m bench.probes.kv_read_gpu --rows 32,64,128,256 --context 3000 --out $OUT/kv-read.json

The temporal transformer of the Moshi 7B shape (32 heads of 128) attends,
per layer and step, one query per row and head to its whole window. Each way
reads a full window (every slot held, as in a long call) of `rows` rows:

- `sdpa_bf16`: moshi's own path, bfloat16 window, SDPA with its mask;
- `chunks_fp8`: the float8 cache read by the plain-torch chunk loop
  (kv_attention.py);
- `kernel_fp8`, `kernel_bf16`: the Triton kernels (kv_kernel.py) over the
  float8 and bfloat16 windows; `kernel_fp8@S` with S runs per query forced,
  `kernel_fp8:NxWxS` with a launch shape forced (`--tiles`: N positions per
  iteration, W warps, S pipeline stages; a trailing `d`: scores and weighted
  values on the matrix units).

Per way: the median of `--repeats` timed reads (CUDA events, after a
warm-up), the window's bytes over that time, and that rate over a
device-to-device copy's (bytes read and written) in the same run: the
fraction of the floor. Each way's output is checked against the chunk loop's
(float8) or SDPA's (bfloat16) as a relative L2 error.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from antiphon.stage0.backends.moshi import kv_kernel
from antiphon.stage0.backends.moshi.fp8 import quantize
from antiphon.stage0.backends.moshi.kv_attention import Window, _chunks, allowed
from bench.lib.args import ints
from bench.lib.machine import torch_device_name
from bench.lib.results import command_line, git_commit, write_json

HEADS, DIM = 32, 128


def timed(fn: Callable[[], object], repeats: int) -> float:
    """Median milliseconds of `fn` on the GPU."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth(repeats: int) -> float:
    """GB/s of a 4 GiB device-to-device copy, bytes read plus written."""
    buffers = torch.empty((2, 1 << 32), dtype=torch.uint8, device="cuda")
    ms = timed(lambda: buffers[1].copy_(buffers[0]), repeats)
    return 2 * (1 << 32) / ms / 1e6


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def level(
    rows: int,
    context: int,
    splits: list[int],
    tiles: list[kv_kernel.Tile],
    repeats: int,
    floor: float,
) -> list[dict]:
    gen = torch.Generator(device="cuda").manual_seed(rows)
    q = torch.randn(rows, HEADS, 1, DIM, device="cuda", generator=gen, dtype=torch.bfloat16)
    k = torch.randn(rows, HEADS, context, DIM, device="cuda", generator=gen, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    positions = torch.arange(context, device="cuda").expand(rows, context).contiguous()
    query_positions = torch.full((rows, 1), context - 1, device="cuda")
    bf16 = Window(k, v, positions)
    (kb, ks), (vb, vs) = quantize(k), quantize(v)
    fp8 = Window(kb.view(torch.float8_e4m3fn), vb.view(torch.float8_e4m3fn), positions, ks, vs)
    del k, v
    mask = allowed(positions, query_positions, context)
    fp8_bytes = kb.nbytes + vb.nbytes + ks.nbytes + vs.nbytes
    bf16_bytes = bf16.keys.nbytes + bf16.values.nbytes
    reference = {
        "bf16": F.scaled_dot_product_attention(q, bf16.keys, bf16.values, mask[:, None]),
        "fp8": _chunks(q, fp8, mask, 512).to(q.dtype),
    }
    ways: dict[str, tuple[Callable[[], torch.Tensor], int, str]] = {
        "sdpa_bf16": (
            lambda: F.scaled_dot_product_attention(q, bf16.keys, bf16.values, mask[:, None]),
            bf16_bytes,
            "bf16",
        ),
        "chunks_fp8": (lambda: _chunks(q, fp8, mask, 512), fp8_bytes, "fp8"),
        "kernel_bf16": (
            lambda: kv_kernel.attend(q, bf16, query_positions, context),
            bf16_bytes,
            "bf16",
        ),
        "kernel_fp8": (
            lambda: kv_kernel.attend(q, fp8, query_positions, context),
            fp8_bytes,
            "fp8",
        ),
    }
    for s in splits:
        ways[f"kernel_fp8@{s}"] = (forced(q, fp8, query_positions, context, s), fp8_bytes, "fp8")
    for t in tiles:
        name = f"kernel_fp8:{t.block_n}x{t.warps}x{t.stages}{'d' if t.dot else ''}"
        ways[name] = (forced(q, fp8, query_positions, context, tile=t), fp8_bytes, "fp8")
    out = []
    for name, (fn, nbytes, kind) in ways.items():
        ms = timed(fn, repeats)
        gbs = nbytes / ms / 1e6
        out.append(
            {
                "rows": rows,
                "context": context,
                "way": name,
                "ms": round(ms, 4),
                "window_gb": round(nbytes / 1e9, 3),
                "gb_per_s": round(gbs, 1),
                "of_floor": round(gbs / floor, 3),
                "rel_err": rel(fn(), reference[kind]),
                "splits": kv_kernel.split_count(rows * HEADS, context)
                if name.startswith("kernel")
                else None,
            }
        )
        print(
            f"rows={rows} ctx={context} {name:>14}: {ms:8.3f} ms  {gbs:7.0f} GB/s "
            f"({gbs / floor:.2f} of copy)  rel err {out[-1]['rel_err']:.2e}",
            flush=True,
        )
    return out


def forced(
    q: torch.Tensor,
    window: Window,
    query_positions: torch.Tensor,
    context: int,
    splits: int | None = None,
    tile: kv_kernel.Tile | None = None,
) -> Callable[[], torch.Tensor]:
    return lambda: kv_kernel.attend(q, window, query_positions, context, splits=splits, tile=tile)


def tile(text: str) -> kv_kernel.Tile:
    block_n, warps, stages = ints(text.removesuffix("d").replace("x", ","))
    return kv_kernel.Tile(block_n, warps, stages, dot=text.endswith("d"))


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.probes.kv_read_gpu", description=__doc__)
    ap.add_argument("--rows", type=ints, default=[32, 64, 128])
    ap.add_argument("--context", type=ints, default=[3000])
    ap.add_argument("--splits", type=ints, default=[1, 4])
    ap.add_argument(
        "--tiles",
        type=lambda text: [tile(t) for t in text.split("/")],
        default=[],
        help="kernel launch shapes to sweep, BLOCKxWARPSxSTAGES (a trailing 'd': on the "
        "matrix units) separated by '/'",
    )
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    floor = copy_bandwidth(args.repeats)
    print(f"device-to-device copy: {floor:.0f} GB/s", flush=True)
    results: list[dict[str, Any]] = []
    for context in args.context:
        for rows in args.rows:
            results.extend(level(rows, context, args.splits, args.tiles, args.repeats, floor))
            torch.cuda.empty_cache()
    write_json(
        args.out,
        {
            "bench": "kv_read_gpu",
            "command": command_line(),
            "commit": git_commit(),
            "device": torch_device_name("cuda"),
            "copy_gb_per_s": round(floor, 1),
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
