"""vLLM's engine on any CPU: what a GPU worker and an AVX-512 BF16 host run,
kept working where the worker picks llama.cpp (test_llm.py runs the picked one)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from antiphon.stage0.assets import prepare
from antiphon.stage0.backends.cascade.llm.cpu_choice import choose_for
from antiphon.stage0.settings import Stage0Settings

if TYPE_CHECKING:
    from antiphon.stage0.backends.cascade.models import Llm

pytestmark = pytest.mark.models


@pytest.fixture(scope="module")
async def vllm_engine(request: pytest.FixtureRequest, model_cache: Path) -> AsyncIterator[Llm]:
    from antiphon.stage0.backends.cascade.models import start_llm

    settings = Stage0Settings()
    choice = choose_for(settings, engine="vllm")
    assets = prepare(model_cache, settings.llm_model, "vllm")
    engine = await start_llm(settings, choice, assets.llm_model)
    try:
        yield engine
    finally:
        await engine.shutdown()


async def test_vllm_answers_and_keeps_no_prometheus_metrics_of_its_own(vllm_engine: Llm) -> None:
    """vLLM's Prometheus logger would observe its histograms for every request
    at every step, on the worker's event loop, into the registry the worker's
    /metrics serves: the engine runs without it (llm._QuietStats), and still
    times its requests."""
    from prometheus_client import REGISTRY

    prompt = vllm_engine.build_prompt(
        [("system", "Answer briefly."), ("user", "What is the capital of France?")]
    )
    outputs = [
        out
        async for out in vllm_engine.generate(
            f"test-{uuid.uuid4().hex[:8]}", prompt, temperature=0.0, max_tokens=6
        )
    ]
    assert "paris" in "".join(o.text for o in outputs).lower()
    last = outputs[-1]
    assert last.metrics is not None and last.metrics.ttft_ms > 0
    vllm_metrics = [m.name for m in REGISTRY.collect() if m.name.startswith("vllm")]
    assert vllm_metrics == []
