"""The engine arguments: one builder decides what a CPU and a GPU worker differ in."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from vllm.engine.arg_utils import AsyncEngineArgs

from antiphon.stage0.backends.cascade.llm.llm import EngineConfig, engine_kwargs, supported_kwargs
from antiphon.stage0.settings import Stage0Settings

MODEL = "/models/some-model"


def test_cpu_gets_an_explicit_kv_budget_and_eager_mode() -> None:
    kwargs = engine_kwargs(MODEL, EngineConfig(kv_cache_gib=1.5), "cpu")
    assert kwargs["kv_cache_memory_bytes"] == int(1.5 * (1 << 30))
    assert kwargs["enforce_eager"] is True
    assert "gpu_memory_utilization" not in kwargs


def test_gpu_sizes_the_kv_cache_from_its_memory_share_and_captures_cuda_graphs() -> None:
    kwargs = engine_kwargs(MODEL, EngineConfig(gpu_memory_utilization=0.7), "cuda")
    assert kwargs["gpu_memory_utilization"] == 0.7
    # An explicit byte budget would override the share: a GPU never passes one.
    assert "kv_cache_memory_bytes" not in kwargs
    assert kwargs["enforce_eager"] is False


def test_an_explicit_eager_setting_wins_on_either_platform() -> None:
    assert engine_kwargs(MODEL, EngineConfig(enforce_eager=False), "cpu")["enforce_eager"] is False
    assert engine_kwargs(MODEL, EngineConfig(enforce_eager=True), "cuda")["enforce_eager"] is True


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
def test_both_platforms_share_the_rest(platform: str) -> None:
    config = EngineConfig(
        max_model_len=4096, max_num_seqs=512, dtype="auto", block_size=32, load_format="dummy"
    )
    kwargs = engine_kwargs(MODEL, config, platform)  # type: ignore[arg-type]
    assert kwargs["model"] == kwargs["tokenizer"] == MODEL
    assert kwargs["dtype"] == "auto"
    assert kwargs["max_model_len"] == 4096
    assert kwargs["max_num_seqs"] == 512
    assert kwargs["block_size"] == 32
    assert kwargs["load_format"] == "dummy"
    assert kwargs["enable_prefix_caching"] is True
    assert kwargs["disable_log_stats"] is True


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
def test_the_prefill_budget_is_vllms_own_unless_set(platform: str) -> None:
    assert "max_num_batched_tokens" not in engine_kwargs(MODEL, EngineConfig(), platform)  # type: ignore[arg-type]
    config = EngineConfig(max_num_batched_tokens=16384, stream_interval=4)
    kwargs = engine_kwargs(MODEL, config, platform)  # type: ignore[arg-type]
    assert kwargs["max_num_batched_tokens"] == 16384
    assert kwargs["stream_interval"] == 4


@pytest.mark.parametrize("platform", ["cpu", "cuda"])
@pytest.mark.parametrize(
    "config", [EngineConfig(), EngineConfig(max_num_batched_tokens=8192, stream_interval=2)]
)
def test_every_argument_is_one_the_installed_vllm_takes(
    platform: str, config: EngineConfig
) -> None:
    names = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    kwargs = engine_kwargs(MODEL, config, platform)  # type: ignore[arg-type]
    assert set(kwargs) <= names
    assert supported_kwargs(kwargs) == kwargs


def test_the_engine_follows_the_worker_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTIPHON_LLM_MAX_NUM_BATCHED_TOKENS", "8192")
    monkeypatch.setenv("ANTIPHON_LLM_STREAM_INTERVAL", "3")
    config = EngineConfig.of(Stage0Settings())
    assert (config.max_num_batched_tokens, config.stream_interval) == (8192, 3)


def test_a_stream_interval_below_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTIPHON_LLM_STREAM_INTERVAL", "0")
    with pytest.raises(ValueError, match="llm_stream_interval"):
        Stage0Settings()


def test_an_argument_this_vllm_lacks_is_left_out_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="antiphon.stage0.backends.cascade.llm.llm"):
        kept = supported_kwargs({"model": MODEL, "no_such_engine_argument": 1})
    assert kept == {"model": MODEL}
    assert "no_such_engine_argument" in caplog.text


def test_the_worker_settings_default_to_a_cpu_worker() -> None:
    settings = Stage0Settings()
    assert settings.llm_max_num_seqs == 16
    assert settings.llm_enforce_eager is None
    assert settings.llm_load_format == "auto"
    assert settings.llm_max_num_batched_tokens is None
    assert settings.llm_stream_interval == 1
    assert 0.0 < settings.llm_gpu_memory_utilization <= 1.0
