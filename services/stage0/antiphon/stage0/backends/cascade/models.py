"""The cascade's engines, loaded once per worker and shared by its sessions."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from antiphon.stage0.assets import TurnAssets, locate
from antiphon.stage0.backends.cascade.asr.asr import WhisperAsr
from antiphon.stage0.backends.cascade.listening.turn import WINDOW_SAMPLES, SmartTurn, TurnModel
from antiphon.stage0.backends.cascade.listening.vad import SileroVad
from antiphon.stage0.backends.cascade.llm.cpu_choice import (
    CpuFeatures,
    LlmChoice,
    burst_threads,
    choose_for,
)
from antiphon.stage0.backends.cascade.llm.generation import Decoding
from antiphon.stage0.backends.cascade.llm.tools import ChatModel
from antiphon.stage0.engine_config import EngineClient, EngineConfig
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings

log = logging.getLogger(__name__)


class TextGenerator(ChatModel, Protocol):
    def build_prompt(self, messages: Sequence[tuple[str, str]]) -> str: ...

    def count_tokens(self, prompt: str) -> int: ...

    def prepare(self, role: str, content: str) -> None:
        """Make ready a message that a later prompt will hold (a transcript, an answer)."""


class Llm(TextGenerator, Protocol):
    """An LLM engine as the worker holds it: vLLM's (llm.py) or llama.cpp's
    (llm_llamacpp.py); tests/stage0/test_llm.py pins what both keep."""

    @property
    def max_model_len(self) -> int: ...

    @property
    def num_active_requests(self) -> int: ...

    def with_decoding(self, decoding: Decoding) -> Llm: ...

    async def abort(self, request_id: str) -> None: ...

    async def shutdown(self, timeout_s: float = 20.0) -> None: ...


class Engines(Protocol):
    """What a cascade session needs from its worker's engines (the cascade's
    models, or the synthetic backend's scripted ones)."""

    @property
    def vad(self) -> SileroVad: ...

    @property
    def turn(self) -> TurnModel: ...

    @property
    def llm(self) -> TextGenerator: ...

    async def transcribe(self, pcm16: bytes) -> str: ...

    async def close(self) -> None: ...


def decoding(settings: Stage0Settings) -> Decoding:
    """The worker's guards against runaway answers, for every request of its engine."""
    allowed = settings.llm_allowed_tokens_file
    return Decoding(
        repetition_penalty=settings.llm_repetition_penalty,
        loop_ngram=settings.llm_loop_ngram,
        loop_repeats=settings.llm_loop_repeats,
        allowed_token_ids=None if allowed is None else allowed_tokens(allowed),
    )


def allowed_tokens(path: Path) -> tuple[int, ...]:
    """`llm_allowed_tokens_file`'s ids: a non-empty JSON list of non-negative ints."""
    ids = json.loads(path.read_text())
    if not ids or not isinstance(ids, list) or not all(type(i) is int and i >= 0 for i in ids):
        raise ValueError(f"{path}: expected a non-empty JSON list of token ids")
    return tuple(ids)


async def start_llm(
    settings: Stage0Settings,
    choice: LlmChoice,
    model: str,
    client: EngineClient | None = None,
) -> Llm:
    """The worker's LLM on the engine `choice` names, from its prepared `model` folder."""
    if choice.engine == "llamacpp":
        # Each engine's package loads with it only: a synthetic worker needs neither.
        from antiphon.stage0.assets import GGUF_FILE
        from antiphon.stage0.backends.cascade.llm.llm_llamacpp import LlamaCppConfig, LlamaCppEngine

        prefill = settings.llm_prefill_threads or choice.prefill_threads
        config = LlamaCppConfig(
            max_model_len=settings.llm_max_model_len,
            max_num_seqs=settings.llm_max_num_seqs,
            kv_cache_gib=settings.llm_kv_cache_gib,
            threads=settings.llm_threads or choice.decode_threads,
            threads_batch=prefill,
        )
        folder = Path(model)
        return await LlamaCppEngine.start(
            folder / GGUF_FILE, folder, config=config, decoding=decoding(settings)
        )
    from antiphon.stage0.backends.cascade.llm.llm import LlmEngine

    dtype = "float32" if choice.format == "gguf" else choice.format
    return await LlmEngine.start(
        model,
        threads=settings.llm_threads or 1,
        config=EngineConfig.of(settings, dtype),
        decoding=decoding(settings),
        client=client,
    )


class Transcriber(Protocol):
    """Whisper as the worker's sessions call it."""

    async def transcribe(self, pcm16: bytes) -> str: ...

    async def close(self) -> None: ...


class PooledWhisper:
    """CTranslate2's Whisper off the event loop, `workers` utterances at a time."""

    def __init__(self, asr: WhisperAsr, workers: int) -> None:
        self._asr = asr
        self._executor = ThreadPoolExecutor(max(1, workers), thread_name_prefix="asr")

    async def transcribe(self, pcm16: bytes) -> str:
        if not pcm16:
            return ""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._asr.transcribe, pcm16)

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


# Half a second of faint noise (PCM16, 16 kHz): enough for every kernel of a pass.
_WARM_UP_CLIP = (np.random.default_rng(0).normal(0, 300, 8000)).astype("<i2").tobytes()


def load_asr(
    settings: Stage0Settings,
    whisper_dir: Path,
    observe_batch: Callable[[int], None],
    observe_graph_run: Callable[[str], None] = lambda _how: None,
    cpu: CpuFeatures | None = None,
) -> Transcriber:
    """The worker's Whisper, on the engine `asr_engine` names."""
    model_dir = settings.asr_model_dir or whisper_dir
    threads = settings.asr_threads or burst_threads(cpu or CpuFeatures.read())
    if settings.asr_engine == "torch":
        # torch loads with this engine only.
        import torch

        from antiphon.stage0.backends.cascade.asr.asr_batch import BatchedAsr
        from antiphon.stage0.backends.cascade.asr.whisper_torch import TorchWhisper

        if not settings.asr_device.startswith("cuda"):
            torch.set_num_threads(threads)
        model = TorchWhisper.load(model_dir, device=settings.asr_device)
        if settings.asr_cuda_graphs:
            from antiphon.stage0.backends.cascade.asr.whisper_graphs import DecodeGraphs

            model.graphs = DecodeGraphs(
                model,
                capture=True,
                max_rows=min(32, settings.asr_max_batch),
                observe_run=observe_graph_run,
            )
        # A GPU loads its kernels on first use (seconds for the first batch):
        # spent here, before the worker is ready, not on a caller's first turn.
        model.transcribe([_WARM_UP_CLIP])
        return BatchedAsr(model, max_batch=settings.asr_max_batch, observe_batch=observe_batch)
    return PooledWhisper(
        WhisperAsr(model_dir, threads=threads, workers=settings.asr_workers),
        settings.asr_workers,
    )


def load_turn(settings: Stage0Settings, assets: TurnAssets) -> TurnModel:
    """The worker's Smart Turn, on the engine `turn_engine` names."""
    if settings.turn_engine == "torch":
        # torch loads with this engine only.
        import torch

        from antiphon.stage0.backends.cascade.listening.turn_torch import TorchSmartTurn

        if not settings.turn_device.startswith("cuda"):
            torch.set_num_threads(settings.turn_threads)
        model = TorchSmartTurn(assets.onnx, device=settings.turn_device)
        # As Whisper's: a GPU's first call loads its kernels, here and not in a turn.
        model.predict([bytes(WINDOW_SAMPLES * 2)])
        return model
    return SmartTurn(assets.onnx, assets.features, threads=settings.turn_threads)


@dataclass
class CascadeModels:
    vad: SileroVad
    turn: TurnModel
    asr: Transcriber
    llm: Llm

    @classmethod
    async def load(
        cls,
        settings: Stage0Settings,
        metrics: Stage0Metrics,
        client: EngineClient | None = None,
    ) -> CascadeModels:
        """The worker's models; its LLM on an engine core of its own, or with
        `client` on the one its pod's supervisor started (front_ends.py)."""
        # Front ends share one vLLM engine core (front_ends.py): vLLM whatever the CPU.
        # Read once: the LLM's choice, its metric label and the ASR's threads.
        cpu = CpuFeatures.read()
        choice = choose_for(settings, engine="vllm" if client else None, cpu=cpu)
        log.info(
            "LLM engine chosen",
            extra={"engine": choice.engine, "format": choice.format, "why": choice.reason},
        )
        metrics.llm_engine.labels(choice.engine, choice.format, cpu.isa).set(1)
        assets = locate(settings.model_cache, settings.llm_model, choice.engine)
        t0 = time.perf_counter()
        vad = SileroVad(assets.vad_onnx, threads=settings.vad_threads)
        turn = load_turn(settings, assets.turn)
        asr = load_asr(
            settings,
            assets.whisper_dir,
            metrics.asr_batch_size.observe,
            lambda how: metrics.asr_graph_batches.labels(how).inc(),
            cpu,
        )
        t1 = time.perf_counter()
        llm = await start_llm(settings, choice, assets.llm_model, client)
        log.info(
            "models loaded",
            extra={
                "vad_asr_s": round(t1 - t0, 2),
                "llm_s": round(time.perf_counter() - t1, 2),
                "llm_model": settings.llm_model,
                "llm_engine": choice.engine,
                "llm_format": choice.format,
            },
        )
        return cls(vad, turn, asr, llm)

    async def transcribe(self, pcm16: bytes) -> str:
        return await self.asr.transcribe(pcm16)

    async def close(self) -> None:
        await self.llm.shutdown()
        await self.asr.close()
