"""The tiny random Moshi the duplex tests serve, its inputs, and the reference:
moshi's own loop (`LMGen` + Mimi encode) on one session's input alone, after
its prompt (if any) forced through LMGen's own hooks.

`random:tiny`'s Mimi has its codebooks filled (moshi_checkpoint), so
different inputs make different answers: the isolation tests check they do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from prometheus_client import CollectorRegistry

from antiphon.common import moshi_checkpoint
from antiphon.common.moshi_checkpoint import FRAME_SAMPLES, SAMPLE_RATE
from antiphon.stage0.backends.moshi.model import DuplexModel, Sampling
from antiphon.stage0.backends.moshi.prompt import ForcedFrame, Prompter
from antiphon.stage0.backends.moshi.rows import FRAME_BYTES, AudioBuffer
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import KVCacheFormat

if TYPE_CHECKING:
    import torch
    from moshi.models.compression import MimiModel
    from moshi.models.lm import LMModel

    from antiphon.stage0.backends.moshi.lockstep import Lockstep

SEED = 1234
GREEDY = Sampling(temp=0.0, temp_text=0.0, top_k=250, top_k_text=25)

moshi_checkpoint.disable_compile_by_default()


def tiny_parts(dtype: torch.dtype) -> tuple[LMModel, MimiModel]:
    """random:tiny's LM and Mimi, the same weights on every call."""
    import torch

    # One thread, as a worker runs it: two under contention on a shared
    # 2-core box run many times slower.
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    checkpoint = moshi_checkpoint.resolve("random:tiny")
    lm = checkpoint.lm("cpu", dtype)
    return lm, checkpoint.mimi("cpu").to(dtype)


def tiny_lockstep(
    slots: int,
    dtype: torch.dtype,
    *,
    metrics: Stage0Metrics | None = None,
    jitter_ms: int = 60_000,
    quiet_frames: int = 12,
    prompter: Prompter | None = None,
    context_tokens: int = 2048,
    kv_cache: KVCacheFormat = "model",
    audio: Callable[[int], AudioBuffer] | None = None,
) -> Lockstep:
    from antiphon.stage0.backends.moshi.lockstep import Lockstep

    lm, mimi = tiny_parts(dtype)
    return Lockstep(
        DuplexModel.build(lm, mimi, GREEDY, prompter=prompter, kv_cache=kv_cache),
        slots,
        metrics=metrics or Stage0Metrics(CollectorRegistry()),
        jitter_ms=jitter_ms,
        quiet_frames=quiet_frames,
        context_tokens=context_tokens,
        audio=audio,
    )


def voice(kind: int, frames: int) -> bytes:
    """`frames` of a distinct input per `kind`: silence, noise, a tone, a slow square."""
    t = np.arange(frames * FRAME_SAMPLES) / SAMPLE_RATE
    rng = np.random.default_rng(kind)
    signals = [
        np.zeros_like(t),
        rng.standard_normal(t.size) * 12_000,
        np.sin(2 * np.pi * 220 * t) * 30_000,
        np.sign(np.sin(2 * np.pi * 3 * t)) * 20_000,
        np.sin(2 * np.pi * 150 * t) * np.sin(2 * np.pi * 0.7 * t) * 25_000,
    ]
    pcm: bytes = np.clip(signals[kind % len(signals)], -32768, 32767).astype("<i2").tobytes()
    return pcm


def reference(
    audio: bytes,
    steps: int,
    dtype: torch.dtype,
    prefill: Sequence[ForcedFrame] = (),
    text_at: Mapping[int, int] | None = None,
) -> list[tuple[int, list[int]]]:
    """(text token, audio codes) per frame moshi's own loop makes of `audio`
    alone over `steps` steps (silence once it runs out), in a fresh state.
    With a `prefill`, its frames come first: their user codes in place of
    Mimi's (which encodes silence meanwhile), their text and agent codes
    forced through LMGen's hooks, their output not kept; `audio` follows.
    `text_at`: text tokens forced (the text hook) at steps after the prompt."""
    import torch
    from moshi.models.lm import LMGen

    lm, mimi = tiny_parts(dtype)
    forcing: list[ForcedFrame | None] = [None]
    said: list[int | None] = [None]

    def on_text(text: torch.Tensor) -> None:
        if forcing[0] is not None:
            text.fill_(forcing[0].text)
        elif said[0] is not None:
            text.fill_(said[0])

    def on_audio(audio_tokens: torch.Tensor) -> None:
        if forcing[0] is not None:
            audio_tokens.copy_(torch.tensor([forcing[0].agent]))

    gen = LMGen(
        lm,
        use_sampling=False,
        support_out_of_sync=True,
        on_text_hook=on_text,
        on_audio_hook=on_audio,
    )
    discard = len(prefill) + gen.max_delay if prefill else 0
    out: list[tuple[int, list[int]]] = []
    with gen.streaming(1), mimi.streaming(1), torch.no_grad():
        for i in range(steps):
            live = i - len(prefill)
            frame = audio[live * FRAME_BYTES : (live + 1) * FRAME_BYTES] if live >= 0 else b""
            pcm = np.zeros(FRAME_SAMPLES, dtype=np.int16)
            if len(frame) == FRAME_BYTES:
                pcm = np.frombuffer(frame, dtype="<i2").copy()
            x = torch.from_numpy(pcm).to(dtype) / 32768.0
            codes = mimi.encode(x[None, None])
            forcing[0] = prefill[i] if live < 0 else None
            said[0] = (text_at or {}).get(live) if live >= 0 else None
            if forcing[0] is not None:
                codes = torch.tensor([forcing[0].user])[:, :, None]
            tokens = gen.step(codes)
            assert tokens is not None
            text, *codes_out = tokens[0, : lm.dep_q + 1, 0].tolist()
            if i >= discard and text != lm.ungenerated_token_id:
                out.append((text, codes_out))
    return out
