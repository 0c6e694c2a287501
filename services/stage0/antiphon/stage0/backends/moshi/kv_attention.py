"""Attention over a KV window read one chunk at a time, with an online
softmax, so a quantized cache is never expanded to the model's dtype whole.

`attend` is the one entry point: a window of keys and values as stored
(float8 with a scale per row, head and position, or the model's dtype with
none) and the positions its slots hold. On a GPU it is two Triton kernels
(kv_kernel.py) that read each stored byte once; the chunk loop here is plain
torch, the CPU's path and the kernels' reference. The scales never multiply the
stored values: a key's scale multiplies its scores (q . s k = s (q . k)) and
a value's scale its softmax weights (sum p s v = sum (p s) v), which is
where a fused kernel applies them too.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

# Positions of the window read per chunk: 512 x 128 dims of float32 is
# 256 KiB a head and row, small beside the window (3,000 at Moshi's context).
CHUNK = 512


class Window(NamedTuple):
    """A KV cache's window as stored; `positions` [B, S]: the step each slot
    holds, -1 where it holds none."""

    keys: torch.Tensor  # [B, H_kv, S, D]
    values: torch.Tensor  # [B, H_kv, S, D]
    positions: torch.Tensor  # [B, S] long
    key_scale: torch.Tensor | None = None  # [B, H_kv, S] float32; None: unscaled
    value_scale: torch.Tensor | None = None


def allowed(
    positions: torch.Tensor, query_positions: torch.Tensor, context: int | None
) -> torch.Tensor:
    """[B, T, S]: the slots a query may attend to, as moshi's causal
    streaming attention masks them: held, not in the future, within `context`."""
    delta = query_positions[:, :, None] - positions[:, None, :]
    mask = (positions[:, None, :] >= 0) & (delta >= 0)
    if context is not None:
        mask &= delta < context
    return mask


def attend(
    q: torch.Tensor,
    window: Window,
    query_positions: torch.Tensor,
    context: int | None,
    *,
    chunk: int = CHUNK,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v over the window, [B, H, T, D] in q's dtype.
    `query_positions` [B, T]. A query with no slot to attend to gets zeros."""
    if q.is_cuda:
        # Imported here: Triton comes with the GPU build only, and the
        # kernel module reads this one's Window.
        from antiphon.stage0.backends.moshi import kv_kernel

        return kv_kernel.attend(q, window, query_positions, context)
    mask = allowed(window.positions, query_positions, context)
    return _chunks(q, window, mask, chunk).to(q.dtype)


def _chunks(q: torch.Tensor, window: Window, mask: torch.Tensor, chunk: int) -> torch.Tensor:
    """The online softmax (running max `m`, sum `l`, output `acc`) in float32,
    a chunk of the window upcast at a time."""
    B, H, T, D = q.shape
    repeat = H // window.keys.shape[1]
    qf = q.float() * (1.0 / math.sqrt(D))
    m = torch.full((B, H, T), -math.inf, device=q.device)
    l = torch.zeros((B, H, T), device=q.device)  # noqa: E741
    acc = torch.zeros((B, H, T, D), device=q.device)
    for start in range(0, window.keys.shape[2], chunk):
        part = slice(start, start + chunk)
        k = _heads(window.keys[:, :, part].float(), repeat)
        v = _heads(window.values[:, :, part].float(), repeat)
        scores = qf @ k.transpose(-1, -2)  # [B, H, T, C]
        if window.key_scale is not None:
            scores = scores * _heads(window.key_scale[:, :, part], repeat)[:, :, None, :]
        scores = scores.masked_fill(~mask[:, None, :, part], -math.inf)
        top = torch.maximum(m, scores.amax(-1))
        # Where nothing is allowed yet the max is -inf: subtract 0 instead, so
        # exp gives 0 and not NaN.
        shift = torch.where(torch.isinf(top), torch.zeros_like(top), top)
        p = torch.exp(scores - shift[..., None])
        carry = torch.exp(m - shift)
        l = l * carry + p.sum(-1)  # noqa: E741
        if window.value_scale is not None:
            p = p * _heads(window.value_scale[:, :, part], repeat)[:, :, None, :]
        acc = acc * carry[..., None] + p @ v
        m = top
    return acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]


def _heads(x: torch.Tensor, repeat: int) -> torch.Tensor:
    """KV heads shared by `repeat` query heads each (moshi's kv_repeat):
    query head j reads KV head j // repeat."""
    return x if repeat == 1 else x.repeat_interleave(repeat, dim=1)
