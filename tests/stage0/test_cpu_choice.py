"""The LLM engine and format the worker picks for a CPU, from fixture feature
sets (tests/stage0/cpuinfo/), not from this machine's."""

from __future__ import annotations

from pathlib import Path

import pytest

from antiphon.stage0.backends.cascade.llm.cpu_choice import CpuFeatures, choose_for, choose_llm
from antiphon.stage0.settings import Stage0Settings

CPUINFO = Path(__file__).parent / "cpuinfo"


def cpu(name: str, cores: int = 2) -> CpuFeatures:
    return CpuFeatures.parse((CPUINFO / f"{name}.txt").read_text(), cores)


@pytest.mark.parametrize(
    ("name", "isa", "engine", "fmt"),
    [
        # bench/cpu_engines.py on this kind of CPU: llama.cpp's 4-bit GGUF
        # against vLLM, whose bf16 is emulated here and float32 slow.
        ("epyc-zen2-avx2", "avx2", "llamacpp", "gguf"),
        # AVX-512 without BF16 emulates bf16 as AVX2 does.
        ("xeon-skylake-avx512", "avx2", "llamacpp", "gguf"),
        # vLLM's oneDNN bf16 kernels (settings.py's measurement).
        ("xeon-sapphire-rapids", "avx512_bf16", "vllm", "bfloat16"),
        # llama.cpp's wheel is built for AVX2: vLLM in float32.
        ("sandy-bridge-avx", "baseline", "vllm", "float32"),
    ],
)
def test_each_cpu_gets_the_engine_measured_fast_there(
    name: str, isa: str, engine: str, fmt: str
) -> None:
    features = cpu(name)
    assert features.isa == isa
    choice = choose_llm(features)
    assert (choice.engine, choice.format) == (engine, fmt)
    assert choice.reason


def test_llamacpp_prefills_and_decodes_on_every_core_it_has_up_to_two() -> None:
    for cores, threads in ((1, 1), (2, 2), (32, 2)):
        choice = choose_llm(cpu("epyc-zen2-avx2", cores=cores))
        assert (choice.prefill_threads, choice.decode_threads) == (threads, threads)


def test_settings_override_the_cpu() -> None:
    zen2 = cpu("epyc-zen2-avx2")
    assert choose_llm(zen2, engine="vllm").format == "float32"
    # An explicit dtype is vLLM in that dtype, as before this choice existed.
    assert choose_llm(zen2, dtype="bfloat16").key == ("vllm", "bfloat16")
    spr = cpu("xeon-sapphire-rapids")
    assert choose_llm(spr, engine="llamacpp").engine == "llamacpp"
    assert choose_llm(zen2, gpu=True).key == ("vllm", "auto")


def test_a_model_without_a_gguf_runs_on_vllm() -> None:
    assert choose_llm(cpu("epyc-zen2-avx2"), has_gguf=False).key == ("vllm", "float32")
    with pytest.raises(ValueError, match="llamacpp"):
        choose_llm(cpu("epyc-zen2-avx2"), engine="llamacpp", has_gguf=False)


def test_the_worker_settings_reach_the_choice() -> None:
    zen2 = cpu("epyc-zen2-avx2")
    assert choose_for(Stage0Settings(), cpu=zen2).engine == "llamacpp"
    local = Stage0Settings(llm_model="/models/my-hf-folder")
    assert choose_for(local, cpu=zen2).engine == "vllm"
    assert choose_for(Stage0Settings(llm_engine="vllm"), cpu=zen2).engine == "vllm"


def test_reading_this_machine_gives_flags_and_cores() -> None:
    here = CpuFeatures.read()
    assert here.cores >= 1
    assert here.isa in {"avx512_bf16", "avx2", "baseline"}
    assert CpuFeatures.read(Path("/nonexistent")).flags == frozenset()
