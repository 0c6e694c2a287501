"""How one LLM engine is sized and run, from the worker's `llm_*` settings.

Apart from llm.py so that building it needs no vLLM (models.py, the benches);
llm.engine_kwargs turns it into vLLM's arguments for a CPU or a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from antiphon.stage0.backends.cascade.llm.cpu_choice import choose_for
from antiphon.stage0.backends.cascade.llm.llm_models import LlmDtype, LoadFormat
from antiphon.stage0.settings import Stage0Settings


@dataclass(frozen=True)
class EngineConfig:
    """How one engine is sized and run: the worker's `llm_*` settings (models.py)."""

    max_model_len: int = 2048
    # CPU: the KV cache's budget. A GPU sizes it from `gpu_memory_utilization`.
    kv_cache_gib: float = 1.0
    # GPU: the share of the card's memory vLLM takes (weights, activations, KV cache).
    gpu_memory_utilization: float = 0.85
    max_num_seqs: int = 16
    # None: vLLM's default prefill budget per step.
    max_num_batched_tokens: int | None = None
    stream_interval: int = 1
    dtype: LlmDtype = "float32"
    block_size: int = 32
    # None: eager on CPU, CUDA graphs on a GPU.
    enforce_eager: bool | None = None
    load_format: LoadFormat = "auto"

    @classmethod
    def of(cls, settings: Stage0Settings, dtype: LlmDtype | None = None) -> EngineConfig:
        """The worker's engine, as its settings size it, in `dtype` (None: the
        format cpu_choice.py picks for vLLM on this machine)."""
        if dtype is None:
            choice = choose_for(settings, engine="vllm")
            dtype = "float32" if choice.format == "gguf" else choice.format
        return cls(
            max_model_len=settings.llm_max_model_len,
            kv_cache_gib=settings.llm_kv_cache_gib,
            gpu_memory_utilization=settings.llm_gpu_memory_utilization,
            max_num_seqs=settings.llm_max_num_seqs,
            max_num_batched_tokens=settings.llm_max_num_batched_tokens,
            stream_interval=settings.llm_stream_interval,
            dtype=dtype,
            block_size=settings.llm_block_size,
            enforce_eager=settings.llm_enforce_eager,
            load_format=settings.llm_load_format,
        )


# An engine started without settings: the defaults above.
DEFAULT_ENGINE = EngineConfig()


@dataclass(frozen=True)
class EngineClient:
    """A front end's way to an engine core that its pod's supervisor started
    (front_ends.py): vLLM's client addresses, opaque here, and which of the
    `count` front ends sharing that core this one is."""

    addresses: Mapping[str, Any]
    count: int
    index: int
