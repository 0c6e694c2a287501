"""The float8 KV cache of the temporal transformer (`duplex_kv_cache: fp8`):
its slots and positions are moshi's ring's, step for step, through exec masks
and row resets; the chunked read is SDPA's attention; it holds about half a
bfloat16 cache's bytes; and a session's tokens stay within a stated bound of
the model-dtype cache's while rows join and leave.

The bound (test_fp8_tokens_track_the_model_dtype_cache_...): e4m3 keeps 3
mantissa bits, so each stored key and value element is within 2^-4 (6.25%)
of itself, 1.8-3.6% RMS. The error reaches the logits through attention's
weighted sums and the residual stream, which carries each layer's input
unrounded: measured on the tiny model, teacher-forced (both caches fed the
same tokens, so the error is the cache's alone, not a diverged history), the
text logits' relative L2 error is 1.1% on average and 2.4% at worst of 360
row-steps; tokens agree 99.7% (text) and 98.2% (audio codes). Pinned with
margin: every step's logit error <= 2^-4, the rounding of one element, and
agreement >= 97% / 95%: a token flips only where the random model's top two
logits lie within that error of each other.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from moshi.modules.transformer import (
    RingKVCache,
    StreamingMultiheadAttention,
    expand_repeated_kv,
)

from antiphon.stage0.backends.moshi.fp8 import quantize
from antiphon.stage0.backends.moshi.kv_attention import Window, attend
from antiphon.stage0.backends.moshi.kv_cache import Fp8KVCache, Fp8State
from antiphon.stage0.backends.moshi.lockstep import Lockstep
from antiphon.stage0.backends.moshi.rows import Row
from tests.stage0.duplex_reference import tiny_lockstep, voice

pytestmark = pytest.mark.models

ROWS, HEADS, DIM, CAPACITY = 3, 4, 8, 10


def schedule(steps: int) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """(exec mask, reset mask or None) per step: rows pause and restart."""
    gen = torch.Generator().manual_seed(5)
    out: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    for step in range(steps):
        exec_mask = torch.rand(ROWS, generator=gen) > 0.25
        reset = torch.tensor([step == 9, False, step == 17]) if step in (9, 17) else None
        out.append((exec_mask, reset))
    return out


def moshi_bias(positions: torch.Tensor, query_positions: torch.Tensor) -> torch.Tensor:
    """moshi's causal streaming mask (StreamingMultiheadAttention.forward)."""
    delta = query_positions[:, :, None] - positions[:, None, :]
    return ((positions[:, None, :] >= 0) & (delta >= 0) & (delta < CAPACITY))[:, None]


@pytest.mark.parametrize("kv_heads", [HEADS, HEADS // 2])
def test_the_chunked_read_is_sdpa_over_moshis_own_cache(kv_heads: int) -> None:
    """Float32 throughout: equal within 1e-5 (outputs are of order 1), over a
    ring that wraps, rows paused by their exec mask, rows reset, chunks of 3
    over a window of 10 (the last one short) and KV heads shared (kv_repeat)."""
    ring = RingKVCache(
        ROWS, kv_heads, DIM, CAPACITY, device=torch.device("cpu"), dtype=torch.float32
    )
    offset = torch.zeros(ROWS, dtype=torch.long)
    gen = torch.Generator().manual_seed(1)
    for exec_mask, reset in schedule(30):
        if reset is not None:
            ring.reset(reset)
            offset = torch.where(reset, 0, offset)
        q = torch.randn(ROWS, HEADS, 1, DIM, generator=gen)
        k, v = torch.randn(2, ROWS, kv_heads, 1, DIM, generator=gen)
        keys, values, positions = ring.complete(k, v, exec_mask)
        query_positions = offset[:, None]
        got = attend(q, Window(keys, values, positions), query_positions, CAPACITY, chunk=3)
        repeat = HEADS // kv_heads
        want = F.scaled_dot_product_attention(
            q,
            expand_repeated_kv(keys, repeat),
            expand_repeated_kv(values, repeat),
            moshi_bias(positions, query_positions),
        )
        # A paused row of a fresh ring attends to nothing: moshi's output
        # there is whatever SDPA makes of an empty mask, and it is discarded.
        live = moshi_bias(positions, query_positions).flatten(1).any(1)
        torch.testing.assert_close(got[live], want[live], atol=1e-5, rtol=1e-5)
        offset = torch.where(exec_mask, offset + 1, offset)


def test_the_fp8_cache_holds_what_moshis_ring_holds_within_e4m3_rounding() -> None:
    """Same appends, exec masks and resets: the same positions exactly, and
    each element within 2^-4 of itself (3 mantissa bits) or, below e4m3's
    normal range, half its smallest step (2^-10 of the scale)."""
    ring = RingKVCache(ROWS, HEADS, DIM, CAPACITY, device=torch.device("cpu"), dtype=torch.float32)
    fp8 = Fp8KVCache(ROWS, HEADS, DIM, CAPACITY, torch.device("cpu"))
    gen = torch.Generator().manual_seed(2)
    for exec_mask, reset in schedule(30):
        if reset is not None:
            ring.reset(reset)
            fp8.reset(reset)
        k, v = torch.randn(2, ROWS, HEADS, 1, DIM, generator=gen) * 3
        keys, values, positions = ring.complete(k, v, exec_mask)
        window = fp8.append(k, v, exec_mask)
        assert torch.equal(window.positions, positions)
        assert window.key_scale is not None and window.value_scale is not None
        for exact, stored, scale in (
            (keys, window.keys, window.key_scale),
            (values, window.values, window.value_scale),
        ):
            held = positions[:, None, :, None].expand_as(exact) >= 0
            back = stored.float() * scale[..., None]
            bound = exact.abs() * 2**-4 + scale[..., None] * 2**-10
            assert ((back - exact).abs() <= bound)[held].all()


def test_quantize_keeps_zero_and_the_largest_magnitude() -> None:
    x = torch.tensor([[0.0, 0.0], [1e-3, -2.5], [7.0, 448.0 * 9]])
    bits, scale = quantize(x)
    back = bits.view(torch.float8_e4m3fn).float() * scale[:, None]
    assert torch.equal(back[0], x[0])
    torch.testing.assert_close(back[:, 1], x[:, 1])
    assert not torch.isnan(back).any()


def test_the_fp8_cache_is_about_half_a_bf16_cache_per_row() -> None:
    """At Moshi's 7B shape (32 heads of 128): 264 bytes per head and position
    (256 of float8, 8 of two float32 scales) against bfloat16's 512."""
    heads, dim, capacity = 32, 128, 100
    bf16 = RingKVCache(1, heads, dim, capacity, device=torch.device("cpu"), dtype=torch.bfloat16)
    fp8 = Fp8KVCache(1, heads, dim, capacity, torch.device("cpu"))
    assert bf16.cache.nbytes == heads * capacity * 512
    assert fp8.nbytes == heads * capacity * 264
    assert fp8.nbytes / bf16.cache.nbytes == pytest.approx(0.516, abs=1e-3)


def temporal_states(lockstep: Lockstep) -> list[object]:
    transformer = lockstep.model.lm_gen.lm_model.transformer
    return [
        m._streaming_state
        for m in transformer.modules()
        if isinstance(m, StreamingMultiheadAttention)
    ]


def test_fp8_takes_the_temporal_transformers_self_attention_only() -> None:
    lockstep = tiny_lockstep(2, torch.float32, kv_cache="fp8")
    states = temporal_states(lockstep)
    assert states and all(isinstance(s, Fp8State) and s.kv_cache is None for s in states)
    # The depformer (streamed per step, apart) keeps moshi's own attention.
    depformer = lockstep.model.lm_gen.lm_model.depformer
    assert {type(layer.self_attn) for layer in depformer.layers} == {StreamingMultiheadAttention}
    model = tiny_lockstep(2, torch.float32)
    assert all(not isinstance(s, Fp8State) for s in temporal_states(model))


def test_fp8_tokens_track_the_model_dtype_cache_while_rows_join_and_leave() -> None:
    """Two batches run the same sessions in step, one on each cache; after
    each step the fp8 batch is given the model-dtype batch's tokens (LMGen's
    hooks), so both hold the same history and differ by the cache alone.
    The bound and its reasoning: the module's docstring."""
    exact = tiny_lockstep(3, torch.float32)
    fp8 = tiny_lockstep(3, torch.float32, kv_cache="fp8")
    a, b = exact.model.lm_gen, fp8.model.lm_gen
    taught: dict[str, torch.Tensor] = {}
    own: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {"text": [], "audio": []}
    errors: list[float] = []
    a_text, a_audio, b_text, b_audio = (
        a.on_text_hook,
        a.on_audio_hook,
        b.on_text_hook,
        b.on_audio_hook,
    )

    def teach(kind: str, hook: object, tokens: torch.Tensor) -> None:
        hook(tokens)  # type: ignore[operator]
        taught[kind] = tokens.clone()

    def learn(kind: str, hook: object, tokens: torch.Tensor) -> None:
        hook(tokens)  # type: ignore[operator]
        own[kind].append((tokens.clone(), taught[kind]))
        tokens.copy_(taught[kind])

    def logit_error(logits: torch.Tensor) -> None:
        errors.append(float((logits - taught["logits"]).norm() / taught["logits"].norm()))

    a.on_text_hook = lambda t: teach("text", a_text, t)
    a.on_audio_hook = lambda t: teach("audio", a_audio, t)
    a.on_text_logits_hook = lambda t: taught.__setitem__("logits", t.clone())
    b.on_text_hook = lambda t: learn("text", b_text, t)
    b.on_audio_hook = lambda t: learn("audio", b_audio, t)
    b.on_text_logits_hook = logit_error
    # name: input kind, step it opens, step it leaves; b's row is reused by d.
    plan = {
        "a": (0, 0, 18),
        "b": (1, 4, 12),
        "c": (2, 6, 120),
        "d": (3, 14, 120),
        "e": (4, 20, 120),
    }
    rows: dict[tuple[str, int], Row] = {}
    for step in range(120):
        for name, (kind, first, leaves) in plan.items():
            for lockstep in (exact, fp8):
                key = (name, id(lockstep))
                if step == leaves:
                    lockstep.release(rows.pop(key))
                if step == first:
                    rows[key] = lockstep.open(lambda e: None, name)
                    lockstep.hear(rows[key], voice(kind, leaves - first))
        exact.step()
        fp8.step()

    def agreement(kind: str) -> float:
        pairs = own[kind]
        return sum(int((o == t).sum()) for o, t in pairs) / sum(o.numel() for o, _ in pairs)

    assert len(errors) == 120
    assert max(errors) <= 2**-4, max(errors)
    assert sum(errors) / len(errors) <= 0.03
    assert agreement("text") >= 0.97
    assert agreement("audio") >= 0.95
    assert not math.isnan(sum(errors))
