"""The `minicpmo` backend as a worker loads it: the checkpoint, one vLLM
engine for the thinker (thinker.py) and the sessions bound to it (session.py)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from antiphon.common.assets import RANDOM_PREFIX
from antiphon.common.minicpmo import checkpoint
from antiphon.common.outbox import Merge
from antiphon.stage0.backends.cascade.llm.llm import (
    _configure_process_env,
    detected_platform,
    engine_kwargs,
    supported_kwargs,
)
from antiphon.stage0.backends.minicpmo.session import MiniCPMoSession
from antiphon.stage0.backends.minicpmo.thinker import Thinker, warm_up
from antiphon.stage0.engine_config import EngineConfig
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import stage_pb2 as pb

log = logging.getLogger(__name__)

# The thinker's context when `duplex_context` is unset: a unit costs 13
# tokens listening and up to 32 speaking, so some 5 to 10 minutes.
DEFAULT_CONTEXT = 8192
# The published duplex decoder's sampling (its `StreamDecoder` settings).
TEMPERATURE, TOP_K, TOP_P, REPETITION_PENALTY = 0.7, 20, 0.8, 1.05


class MiniCPMoEngines:
    merge: Merge[pb.Stage0Event] | None = None

    def __init__(
        self,
        thinker: Thinker,
        settings: Stage0Settings,
        metrics: Stage0Metrics,
        random_folder: Path | None,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self.thinker = thinker
        self._on_failure = on_failure
        self._settings = settings
        self._metrics = metrics
        self._random_folder = random_folder

    @classmethod
    async def load(
        cls,
        settings: Stage0Settings,
        metrics: Stage0Metrics,
        on_failure: Callable[[], None] = lambda: None,
    ) -> MiniCPMoEngines:
        """The engine started and warmed up; `on_failure`: it died while serving."""
        from vllm import SamplingParams
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        ckpt = await asyncio.to_thread(checkpoint.resolve, settings.duplex_checkpoint)
        platform = detected_platform()
        _configure_process_env(settings.duplex_threads, platform)
        config = EngineConfig(
            max_model_len=settings.duplex_context or DEFAULT_CONTEXT,
            kv_cache_gib=settings.llm_kv_cache_gib,
            gpu_memory_utilization=settings.llm_gpu_memory_utilization,
            max_num_seqs=settings.capacity,
            dtype="float32" if platform == "cpu" else "bfloat16",
            load_format="auto" if ckpt.has_weights else "dummy",
        )
        kwargs = engine_kwargs(str(ckpt.folder), config, platform) | {
            # The tokenizer and image processor are code of the folder (common/minicpmo).
            "trust_remote_code": True,
            # A session's context is its own: no prefix to share but the system turn.
            "enable_prefix_caching": False,
            # A unit holds a second of audio and at most one camera frame.
            "limit_mm_per_prompt": {"audio": 1, "image": 1, "video": 0},
            "seed": settings.duplex_seed or 0,
        }
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**supported_kwargs(kwargs)))
        temperature = settings.duplex_text_temperature
        sampling = SamplingParams(
            temperature=TEMPERATURE if temperature is None else temperature,
            top_k=settings.duplex_text_top_k or TOP_K,
            top_p=TOP_P,
            repetition_penalty=REPETITION_PENALTY,
            seed=settings.duplex_seed,
        )
        # A random checkpoint's folder was written for this worker.
        random_folder = ckpt.folder if ckpt.name.startswith(RANDOM_PREFIX) else None
        slicing = ckpt.config.get("slice_config") or {}
        thinker = Thinker(engine, sampling, scale_resolution=slicing.get("scale_resolution", 448))
        started = time.monotonic()
        sizes = await warm_up(thinker, settings.capacity)
        log.info(
            "minicpmo thinker warmed up",
            extra={"batches": sizes, "seconds": round(time.monotonic() - started, 2)},
        )
        return cls(thinker, settings, metrics, random_folder, on_failure)

    def bind(self, emit: Callable[[pb.Stage0Event], None]) -> MiniCPMoSession:
        jitter_ms = self._settings.duplex_jitter_ms
        return MiniCPMoSession(
            self.thinker, emit, self._metrics, jitter_ms=jitter_ms, on_failure=self._on_failure
        )

    async def close(self) -> None:
        self.thinker.engine.shutdown()
        if self._random_folder is not None:
            shutil.rmtree(self._random_folder, ignore_errors=True)
