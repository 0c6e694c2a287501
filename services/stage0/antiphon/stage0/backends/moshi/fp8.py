"""How the float8 KV cache stores a key or value vector: e4m3 scaled by the
vector's own largest magnitude, the scale in float32 beside it.

Apart from kv_cache.py, which needs moshi's attention classes, so that what
reads the format (the bench's probe, the kernels' checks) needs torch alone.
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # e4m3's largest finite value; a cast past it gives NaN


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., D] as float8 bits (uint8) and a float32 scale per vector [...],
    x ~= bits.view(FP8) * scale."""
    amax = x.abs().amax(-1).float()
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    scaled = (x.float() / scale[..., None]).clamp(-FP8_MAX, FP8_MAX)
    return scaled.to(FP8).view(torch.uint8), scale
