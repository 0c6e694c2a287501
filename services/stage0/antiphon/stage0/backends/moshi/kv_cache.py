"""The temporal transformer's KV cache in float8 (`duplex_kv_cache: fp8`).

Each key and value vector (one row, head and position) is stored as float8
e4m3 scaled by its own largest magnitude (a float32 scale beside it), so a
row's cache is about half its bfloat16 bytes: at Moshi's 7B shape (32 heads of
128) 264 bytes against 512 per head and position. The cache is a ring as
moshi's `RingKVCache` is: a row writes at its own end offset modulo the
capacity, a row whose exec mask is off writes but does not advance (so its
write is overwritten at its next real step), and `reset(mask)` restarts the
masked rows alone, so sessions join and leave the lockstep batch mid-run.

Only the temporal transformer's self-attention takes it (`install`): the
depformer's cache is a few positions. With `model` nothing here runs: the
layers stay moshi's own, token for token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from moshi.modules.transformer import StreamingMultiheadAttention, _MHAState

from antiphon.stage0.backends.moshi.fp8 import FP8, quantize
from antiphon.stage0.backends.moshi.kv_attention import Window, attend
from antiphon.stage0.settings import KVCacheFormat


class Fp8KVCache:
    """A ring of `capacity` positions per row of float8 keys and values."""

    def __init__(
        self, batch_size: int, heads: int, dim: int, capacity: int, device: torch.device
    ) -> None:
        self.capacity = capacity
        # float8 held as its bits: torch's CPU scatter takes no float8 dtype.
        self.data = torch.zeros(
            (2, batch_size, heads, capacity, dim), dtype=torch.uint8, device=device
        )
        self.scale = torch.zeros((2, batch_size, heads, capacity), device=device)
        self.end_offset = torch.zeros(batch_size, dtype=torch.long, device=device)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.scale.nbytes

    def reset(self, mask: torch.Tensor) -> None:
        self.end_offset[:] = torch.where(mask, torch.zeros_like(self.end_offset), self.end_offset)

    def append(self, k: torch.Tensor, v: torch.Tensor, exec_mask: torch.Tensor) -> Window:
        """Writes `k`, `v` [B, H, T, D] at each row's end and gives the window."""
        B, H, T, D = k.shape
        steps = torch.arange(T, device=k.device)
        slots = (self.end_offset[:, None] + steps) % self.capacity  # [B, T]
        for i, x in enumerate((k, v)):
            bits, scale = quantize(x)
            self.data[i].scatter_(2, slots.view(B, 1, T, 1).expand(B, H, T, D), bits)
            self.scale[i].scatter_(2, slots.view(B, 1, T).expand(B, H, T), scale)
        last = self.end_offset + (T - 1)
        self.end_offset[:] = torch.where(exec_mask, self.end_offset + T, self.end_offset)
        return Window(
            self.data[0].view(FP8),
            self.data[1].view(FP8),
            self.positions(last),
            self.scale[0],
            self.scale[1],
        )

    def positions(self, last: torch.Tensor) -> torch.Tensor:
        """[B, S]: the step each slot holds, given each row's last written
        step; -1 for a slot not yet written since the row's reset (a slot is
        held once the row's end offset has passed it, as moshi counts)."""
        slots = torch.arange(self.capacity, device=last.device)
        held = last[:, None] - (last[:, None] - slots) % self.capacity
        return torch.where(slots < self.end_offset[:, None], held, torch.full_like(held, -1))


@dataclass
class Fp8State(_MHAState):
    """moshi's attention state with our cache beside it: moshi's `kv_cache`
    stays None (its RingKVCache is never built), and a reset reaches ours."""

    cache: Fp8KVCache = field(kw_only=True)

    def reset(self, reset_mask: torch.Tensor) -> None:
        super().reset(reset_mask)
        self.cache.reset(reset_mask)


class Fp8CacheAttention(StreamingMultiheadAttention):
    """moshi's causal streaming self-attention with the float8 cache.

    `install` swaps an existing layer's class to this one rather than wrap
    `_complete_kv`: the cache is only half the change, the read is the other,
    and moshi's `forward` hands what `_complete_kv` gives to SDPA whole, which
    would mean a model-dtype copy of the window every step. A class swap
    keeps the layer's weights, load hooks and place in the streaming tree,
    and its `_init_streaming_state` never allocates moshi's ring, so the
    model-dtype cache does not exist even for a moment.
    """

    def _init_streaming_state(self, batch_size: int) -> _MHAState:
        weight = self.in_projs[0].weight
        assert isinstance(weight, torch.Tensor) and self.context is not None
        device = weight.device
        return Fp8State(
            batch_size,
            device,
            None,
            offset=torch.zeros(batch_size, device=device, dtype=torch.long),
            offset_cpu=0,
            cache=Fp8KVCache(
                batch_size,
                self.num_heads // self.kv_repeat,
                self.embed_dim // self.num_heads,
                self.context,
                device,
            ),
        )

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        state = self._streaming_state
        if not isinstance(state, Fp8State):
            # Not streaming (a whole sequence at once): moshi's own path.
            whole: torch.Tensor = super().forward(query, key, value)
            return whole
        B, T, E = query.shape
        heads, dim = self.num_heads, self.embed_dim // self.num_heads
        projected = self.in_projs[0](query)
        q = projected[..., :E].view(B, T, heads, dim).transpose(1, 2)
        k, v = projected[..., E:].view(B, T, 2, -1, dim).permute(2, 0, 3, 1, 4)
        if self.rope is not None:
            q, k = self.rope(q, k, state.offset, time_before_heads=False)
        window = state.cache.append(k, v, state.exec_mask)
        query_positions = state.offset[:, None] + torch.arange(T, device=q.device)
        x = attend(q, window, query_positions, self.context)
        out: torch.Tensor = self.out_projs[0](x.transpose(1, 2).reshape(B, T, E))
        state.offset[:] = torch.where(state.exec_mask, state.offset + T, state.offset)
        state.offset_cpu += T
        return out


def install(transformer: torch.nn.Module, kv_format: KVCacheFormat) -> int:
    """Gives `transformer`'s (the LM's temporal transformer) self-attention
    layers the cache `kv_format` names, before streaming starts; how many."""
    if kv_format == "model":
        return 0
    layers = [
        m
        for m in transformer.modules()
        if isinstance(m, StreamingMultiheadAttention) and not m.cross_attention
    ]
    for layer in layers:
        if layer.is_streaming:
            raise RuntimeError("the KV cache format is set before streaming starts")
        if not layer.causal or layer.weights_per_step or layer.context is None:
            raise ValueError("the float8 cache serves causal attention over a context only")
        if len(layer.in_projs) != 1 or not isinstance(layer.in_projs[0], torch.nn.Linear):
            raise ValueError("the float8 cache serves unquantized linear projections only")
        layer.__class__ = Fp8CacheAttention
    return len(layers)
