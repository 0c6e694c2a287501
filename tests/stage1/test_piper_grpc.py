"""A stage1 worker with Piper on the `torch` engine (here on the CPU, where the
tests run; a GPU is one setting away), over a real gRPC server: sessions
answering at the same time are voiced in shared batches, and each gets its
own words back as audio."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage1 import backends
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.settings import Stage1Settings
from antiphon.v1 import stage_pb2_grpc
from tests.stage1.serving import answer, serving
from tests.support import tiers

SESSIONS = 3


@dataclass
class Worker:
    stub: stage_pb2_grpc.Stage1ServiceStub
    registry: CollectorRegistry


@pytest.fixture
async def worker(request: pytest.FixtureRequest) -> AsyncIterator[Worker]:
    tiers.require(request, tiers.MODELS, "loads the Piper voice")
    settings = Stage1Settings(tts_engine="torch", tts_device="cpu", tts_max_batch=8, capacity=4)
    registry = CollectorRegistry()
    stage_metrics = Stage1Metrics(registry)
    backend = backends.load("piper")
    context = backends.BackendContext(settings, stage_metrics, registry, lambda: None)
    async with (
        backend.open(context) as sessions,
        serving(settings, sessions, backend.capabilities, stage_metrics) as stub,
    ):
        yield Worker(stub, registry)


@pytest.mark.models
async def test_the_batched_voice_has_run_once_before_the_worker_serves(worker: Worker) -> None:
    """A GPU loads its kernels on the first batch: the worker spends that at its
    start (PiperTts.warm), not on a caller's first answer."""
    assert worker.registry.get_sample_value("antiphon_stage1_tts_batch_size_count") == 1


@pytest.mark.models
async def test_sessions_answering_at_once_share_batches_and_each_hears_its_own_words(
    worker: Worker,
) -> None:
    texts = [
        "Sure, the store opens at nine.",
        "Your order ships tomorrow morning.",
        "I can book a table for two people tonight.",
    ]
    answers = await asyncio.gather(
        *(answer(worker.stub, f"s{i}", text) for i, text in enumerate(texts))
    )
    for text, chunks in zip(texts, answers, strict=True):
        assert "".join(c.text for c in chunks) == text  # the words, whole, in order
        pcm = np.frombuffer(b"".join(c.pcm16 for c in chunks), np.int16)
        assert all(c.sample_rate_hz == 16000 for c in chunks)
        assert len(pcm) > 16000 * 0.8  # about a second of speech or more
        assert np.abs(pcm).max() > 1000  # speech, not silence
    batches = worker.registry.get_sample_value("antiphon_stage1_tts_batch_size_count")
    sentences = worker.registry.get_sample_value("antiphon_stage1_tts_batch_size_sum")
    assert batches is not None and sentences is not None
    # Every clause went through the batcher, and some shared a batch.
    assert batches < sentences
