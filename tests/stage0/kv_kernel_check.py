"""The Triton window read (kv_kernel.py) against the chunk loop, on any device.

    TRITON_INTERPRET=1 python -m tests.stage0.kv_kernel_check cpu   # Triton's interpreter
    python -m tests.stage0.kv_kernel_check cuda                      # the GPU's kernels

One check for both, so the kernels the GPU runs are the ones the CPU tests
read: windows from the float8 cache's own ring (wrapped, rows paused by their
exec mask and reset, a row never written), a window in the model's dtype, a
context shorter than the ring and none, KV heads shared by query heads, two
queries per row, runs per query forced from one to more than the window
has blocks, and both ways to multiply (vector lanes, matrix units). Both
compute in float32 from the same stored values, so they agree to float32
rounding (1e-5 relative; outputs are of order 1), or to
bfloat16's where the output is bfloat16.
"""

from __future__ import annotations

import sys

import torch

from antiphon.stage0.backends.moshi import kv_kernel
from antiphon.stage0.backends.moshi.kv_attention import Window, _chunks, allowed
from antiphon.stage0.backends.moshi.kv_cache import Fp8KVCache

ROWS, HEADS, DIM = 3, 4, 16
# The kernel's two ways to multiply: on the vector lanes, on the matrix units.
TILES = (kv_kernel.Tile(dot=False), kv_kernel.Tile(dot=True))


def ring_window(device: str, kv_heads: int, capacity: int, steps: int) -> Window:
    """The float8 cache after `steps` appends of one position, row 0 reset
    midway, row 1 paused every third step, row 2 never stepped."""
    gen = torch.Generator().manual_seed(capacity + kv_heads)
    cache = Fp8KVCache(ROWS, kv_heads, DIM, capacity, torch.device(device))
    window = None
    for step in range(steps):
        if step == steps // 2:
            cache.reset(torch.tensor([True, False, False], device=device))
        exec_mask = torch.tensor([True, step % 3 != 0, False], device=device)
        k, v = (torch.randn(2, ROWS, kv_heads, 1, DIM, generator=gen) * 2).to(device)
        window = cache.append(k, v, exec_mask)
    assert window is not None
    return window


def cases(device: str) -> list[tuple[str, Window, torch.Tensor, int | None, torch.Tensor]]:
    gen = torch.Generator().manual_seed(7)
    out = []
    for kv_heads in (HEADS, HEADS // 2):
        window = ring_window(device, kv_heads, capacity=100, steps=150)
        for queries in (1, 2):
            q = torch.randn(ROWS, HEADS, queries, DIM, generator=gen).to(device)
            query_positions = window.positions.amax(1, keepdim=True).clamp(min=0) + torch.arange(
                queries, device=device
            )
            for context in (60, None):
                name = f"fp8 kv_heads={kv_heads} queries={queries} context={context}"
                out.append((name, window, query_positions, context, q))
            # The model's own query dtype on a GPU, which the matrix units take.
            name = f"fp8 bf16 query kv_heads={kv_heads} queries={queries}"
            out.append((name, window, query_positions, 60, q.to(torch.bfloat16)))
    keys = torch.randn(ROWS, HEADS, 90, DIM, generator=gen).to(device, torch.bfloat16)
    positions = torch.randint(-1, 100, (ROWS, 90), generator=gen).to(device)
    q = torch.randn(ROWS, HEADS, 1, DIM, generator=gen).to(device, torch.bfloat16)
    model_dtype = Window(keys, torch.randn_like(keys), positions)
    out.append(("bf16", model_dtype, torch.full((ROWS, 1), 80, device=device), 50, q))
    return out


def main(device: str) -> None:
    every = (None, 1, 3, 16)
    reads = 0
    for i, (name, window, query_positions, context, q) in enumerate(cases(device)):
        # The chunk loop's float32 result, before its cast to q's dtype.
        mask = allowed(window.positions, query_positions, context)
        want = _chunks(q, window, mask, 32).cpu()
        splits = every[i % len(every)]
        # A float32 query never takes the matrix units: one tile is enough.
        for tile in TILES if q.dtype == torch.bfloat16 else TILES[:1]:
            got = kv_kernel.attend(q, window, query_positions, context, splits=splits, tile=tile)
            assert got.dtype == q.dtype and got.shape == q.shape, name
            err = float((got.float().cpu() - want).norm() / want.norm())
            # float32 rounding; or bfloat16's output within one unit in its
            # last place (8 bits), its softmax weights rounded likewise on the
            # matrix units.
            bound = 1e-5 if q.dtype == torch.float32 else 2**-8
            assert err <= bound, f"{name} splits={splits} {tile}: relative error {err:.2e}"
            assert not got.isnan().any(), name
            reads += 1
    print(f"kv_kernel matches the chunk loop: {reads} reads of {i + 1} windows on {device}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
