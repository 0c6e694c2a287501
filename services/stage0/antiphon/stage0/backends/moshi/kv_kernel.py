# Triton's kernels take no Python type annotations (it reads its own, such as
# tl.constexpr), and `triton.jit` is untyped.
# mypy: disable-error-code="untyped-decorator,no-untyped-def"
"""The KV window's read as two Triton kernels: the GPU's `attend`.

Decoding reads one query per row and head against the whole window, so the
step is bound by the bytes of the window, not by arithmetic. The chunk loop
(kv_attention.py) reads each chunk several times over (upcast, scores, mask,
exp, weights), as ~10 kernels per chunk and layer; here every key and value
byte is read once, as stored (float8 bits or the model's dtype), upcast in
registers, and never written back.

Flash decoding: `_partials` splits each (row, head, query)'s window into
`splits` runs of positions, one program per run, each keeping the online
softmax (max `m`, sum `l`, weighted values `acc`) of its run; `_combine`
merges a query's runs. Splits keep the GPU busy when rows x heads alone are
too few programs; at hundreds of rows one run per query is enough.

The scales multiply scores and softmax weights, not the stored values, as in
kv_attention.py, and masked positions are never loaded: a fresh row's empty
window costs nothing.

Triton is imported by the caller only on a GPU (vLLM's CUDA build brings it);
the CPU tests run these kernels under Triton's interpreter
(TRITON_INTERPRET=1) against the chunk loop.
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from antiphon.stage0.backends.moshi.kv_attention import Window


class Tile(NamedTuple):
    """A launch's shape: positions per iteration, warps per program, and the
    software pipeline's depth (loads in flight ahead of the math).

    The default is the sweep's best on an H100 (bench/results/duplex-h100-fp8.json,
    `kv_read_sweep`: 128 rows x 3,000 positions): 64 x 2 x 3 read at 0.89 of
    the card's copy bandwidth, 128 x 4 x 3 at 0.88, 64 x 4 x 3 at 0.32; the
    matrix units (`dot`) at best 0.69.
    """

    block_n: int = 64
    warps: int = 2
    stages: int = 3
    # Scores and weighted values on the matrix units (bfloat16 queries only).
    dot: bool = False


TILE = Tile()
BLOCK_N = TILE.block_n
# The matrix units' operand type. Triton's interpreter (3.9) multiplies
# bfloat16 matrices wrong; float16 holds the same float8 values exactly, so
# the CPU's check of this path differs in that one cast. Read once, as
# `triton.jit` reads it to choose the interpreter.
MMA = tl.float16 if os.environ.get("TRITON_INTERPRET") == "1" else tl.bfloat16
# Enough programs to cover a GPU several times over (132 SMs on an H100).
TARGET_PROGRAMS = 2048
MAX_SPLITS = 16


@triton.jit
def _stored(start, stride, n, d, ok, FP8: tl.constexpr):
    """The vectors at positions `n` of one row and head as stored (float8
    bits read as float8), zeros where not `ok` (never loaded)."""
    x = tl.load(start + n[:, None] * stride + d[None, :], mask=ok[:, None], other=0)
    if FP8:
        x = x.to(tl.float8e4nv, bitcast=True)
    return x


@triton.jit
def _partials(
    q_ptr,
    k_ptr,
    v_ptr,
    ks_ptr,
    vs_ptr,
    pos_ptr,
    qpos_ptr,
    m_ptr,
    l_ptr,
    acc_ptr,
    H,
    T,
    S,
    repeat,
    context,
    split_len,
    sm_scale,
    stride_qb,
    stride_qh,
    stride_qt,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_ksb,
    stride_ksh,
    stride_vsb,
    stride_vsh,
    stride_pb,
    SPLITS: tl.constexpr,
    D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FP8: tl.constexpr,
    SCALED: tl.constexpr,
    HAS_CONTEXT: tl.constexpr,
    DOT: tl.constexpr,
    R: tl.constexpr,
    MMA: tl.constexpr,
):
    query = tl.program_id(0)  # over B x H x T
    split = tl.program_id(1)
    t = query % T
    h = (query // T) % H
    b = query // (T * H)
    hk = h // repeat
    d = tl.arange(0, D)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + t * stride_qt + d)
    # R copies of the query: the matrix units take 16 rows at least, and the
    # copies cost no bytes, only idle lanes of an otherwise idle unit.
    q = tl.broadcast_to(q[None, :], (R, D))
    if not DOT:
        q = q.to(tl.float32)
    qpos = tl.load(qpos_ptr + b * T + t)
    m = tl.full([R], float("-inf"), tl.float32)
    l = tl.zeros([R], dtype=tl.float32)  # noqa: E741
    acc = tl.zeros([R, D], dtype=tl.float32)
    start = split * split_len
    end = tl.minimum(start + split_len, S)
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        inside = n < end
        pos = tl.load(pos_ptr + b * stride_pb + n, mask=inside, other=-1)
        delta = qpos - pos
        ok = inside & (pos >= 0) & (delta >= 0)
        if HAS_CONTEXT:
            ok = ok & (delta < context)
        keys = _stored(k_ptr + b * stride_kb + hk * stride_kh, stride_ks, n, d, ok, FP8)
        if DOT:
            # e4m3 -> bfloat16 is exact; the products accumulate in float32.
            scores = tl.dot(q.to(MMA), tl.trans(keys.to(MMA)))
        else:
            scores = tl.sum(keys.to(tl.float32) * q, 1)[None, :]
        scores *= sm_scale
        if SCALED:
            ks = tl.load(ks_ptr + b * stride_ksb + hk * stride_ksh + n, mask=ok, other=0.0)
            scores *= ks[None, :]
        scores = tl.where(ok[None, :], scores, float("-inf"))
        top = tl.maximum(m, tl.max(scores, 1))
        # Nothing allowed yet: the max is -inf; shift by 0 so exp gives 0, not NaN.
        shift = tl.where(top == float("-inf"), 0.0, top)
        p = tl.exp(scores - shift[:, None])
        carry = tl.exp(m - shift)
        l = l * carry + tl.sum(p, 1)  # noqa: E741
        if SCALED:
            vs = tl.load(vs_ptr + b * stride_vsb + hk * stride_vsh + n, mask=ok, other=0.0)
            p *= vs[None, :]
        values = _stored(v_ptr + b * stride_vb + hk * stride_vh, stride_vs, n, d, ok, FP8)
        if DOT:
            weighted = tl.dot(p.to(MMA), values.to(MMA))
        else:
            weighted = tl.sum(tl.sum(p, 0)[:, None] * values.to(tl.float32), 0)[None, :]
        acc = acc * carry[:, None] + weighted
        m = top
    # The R rows are equal: keep the first.
    first = tl.arange(0, R)[:, None] == 0
    at = query * SPLITS + split
    tl.store(m_ptr + at, tl.max(m, 0))
    tl.store(l_ptr + at, tl.max(l, 0))
    tl.store(acc_ptr + at * D + d, tl.sum(tl.where(first, acc, 0.0), 0))


@triton.jit
def _combine(m_ptr, l_ptr, acc_ptr, out_ptr, splits, SPLITS: tl.constexpr, D: tl.constexpr):
    query = tl.program_id(0)
    s = tl.arange(0, SPLITS)
    used = s < splits
    m = tl.load(m_ptr + query * SPLITS + s, mask=used, other=float("-inf"))
    top = tl.max(m, 0)
    shift = tl.where(top == float("-inf"), 0.0, top)
    w = tl.where(used, tl.exp(m - shift), 0.0)
    total = tl.sum(w * tl.load(l_ptr + query * SPLITS + s, mask=used, other=0.0), 0)
    d = tl.arange(0, D)
    acc = tl.load(
        acc_ptr + (query * SPLITS + s[:, None]) * D + d[None, :], mask=used[:, None], other=0.0
    )
    out = tl.sum(w[:, None] * acc, 0) / tl.where(total > 0, total, 1.0)
    tl.store(out_ptr + query * D + d, out)


def split_count(
    programs: int, positions: int, block_n: int = BLOCK_N, target: int = TARGET_PROGRAMS
) -> int:
    """Runs per query: enough programs in all to fill the GPU, none shorter
    than a block."""
    wanted = max(1, math.ceil(target / max(programs, 1)))
    return max(1, min(wanted, MAX_SPLITS, math.ceil(positions / block_n)))


def attend(
    q: torch.Tensor,
    window: Window,
    query_positions: torch.Tensor,
    context: int | None,
    *,
    splits: int | None = None,
    tile: Tile | None = None,
) -> torch.Tensor:
    """kv_attention.attend's contract, [B, H, T, D] in q's dtype. `splits`
    and `tile` force a launch's shape (the bench's sweep); by default the
    measured best (TILE, split_count)."""
    tile = tile or TILE
    B, H, T, D = q.shape
    keys, values = window.keys, window.values
    S = keys.shape[2]
    fp8 = keys.dtype == torch.float8_e4m3fn
    if fp8:
        # Triton takes float8 pointers on Hopper only; the bits read anywhere.
        keys, values = keys.view(torch.uint8), values.view(torch.uint8)
    if q.stride(-1) != 1 or keys.stride(-1) != 1 or values.stride(-1) != 1:
        raise ValueError("the kernel reads rows of D contiguous elements")
    count = splits or split_count(B * H * T, S, tile.block_n)
    pow2 = triton.next_power_of_2(count)
    split_len = triton.cdiv(triton.cdiv(S, count), tile.block_n) * tile.block_n
    count = triton.cdiv(S, split_len)
    m = torch.empty((B * H * T, pow2), dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)  # noqa: E741
    acc = torch.empty((B * H * T, pow2, D), dtype=torch.float32, device=q.device)
    scaled = window.key_scale is not None and window.value_scale is not None
    # The matrix units take bfloat16: exact for float8 and bfloat16 keys, and
    # a bfloat16 query is the model's own.
    dot = tile.dot and q.dtype == torch.bfloat16 and (fp8 or keys.dtype == torch.bfloat16)
    ks = window.key_scale if scaled else m  # any float32 pointer: never read
    vs = window.value_scale if scaled else m
    assert ks is not None and vs is not None
    positions = window.positions.contiguous()
    qpos = query_positions.contiguous()
    _partials[(B * H * T, count)](
        q,
        keys,
        values,
        ks,
        vs,
        positions,
        qpos,
        m,
        l,
        acc,
        H,
        T,
        S,
        H // keys.shape[1],
        context or 0,
        split_len,
        1.0 / math.sqrt(D),
        q.stride(0),
        q.stride(1),
        q.stride(2),
        keys.stride(0),
        keys.stride(1),
        keys.stride(2),
        values.stride(0),
        values.stride(1),
        values.stride(2),
        ks.stride(0) if scaled else 0,
        ks.stride(1) if scaled else 0,
        vs.stride(0) if scaled else 0,
        vs.stride(1) if scaled else 0,
        positions.stride(0),
        SPLITS=pow2,
        D=D,
        BLOCK_N=tile.block_n,
        FP8=fp8,
        SCALED=scaled,
        HAS_CONTEXT=context is not None,
        DOT=dot,
        R=16 if dot else 1,
        MMA=MMA,
        num_warps=tile.warps,
        num_stages=tile.stages,
    )
    out = torch.empty((B, H, T, D), dtype=q.dtype, device=q.device)
    _combine[(B * H * T,)](m, l, acc, out, count, SPLITS=pow2, D=D)
    return out
