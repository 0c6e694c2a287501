"""One Piper voice per test session (loading it takes about a second); a
fresh tiny Mimi decoder per test (it builds in milliseconds); one tiny
Nemotron VoiceChat EAR-TTS per test session (some ten seconds)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.speech.scheduler import SynthesisScheduler
from antiphon.stage1.speech.synthesis import SynthesisSession
from antiphon.stage1.speech.voice import Voice
from tests.stage1.speaking import Heard, Speaker
from tests.support import tiers

if TYPE_CHECKING:
    from moshi.models.compression import MimiModel

    from antiphon.stage1.backends.piper.tts import PiperTts
    from tests.stage1.nemotron_reference import TinyNemotron


@pytest.fixture(scope="session")
def piper_tts(request: pytest.FixtureRequest) -> PiperTts:
    tiers.require(request, tiers.MODELS, "loads the Piper voice")
    # Imported here so that collecting the model-free tests needs no Piper.
    from antiphon.stage1.backends.piper.assets import locate
    from antiphon.stage1.backends.piper.tts import PiperTts

    assets = locate()
    return PiperTts(assets.voice_onnx, assets.voice_config, threads=1, out_rate=24000)


@pytest.fixture
def make_tiny_mimi(request: pytest.FixtureRequest) -> Callable[[], MimiModel]:
    """Builds the tiny random Mimi (`random:tiny`, seeded), the same one at
    every call, in float64: batched and single-row kernels then agree to
    float64 rounding.

    Its codebooks are drawn small, at the scale of a random encoder's
    latents, so that stage0's encoder tells inputs apart; decoded, codes then
    differ by less than a PCM16 step. Drawn at unit scale here, a row's
    audio depends on its codes as a real Mimi's does, which is what these
    tests compare."""
    tiers.require(request, tiers.MODELS, "builds a Mimi decoder")
    from antiphon.common import moshi_checkpoint

    moshi_checkpoint.disable_compile_by_default()
    import torch

    torch.set_num_threads(1)  # as a worker runs it; two threads on two shared cores crawl

    from moshi.quantization.core_vq import EuclideanCodebook

    def build() -> MimiModel:
        mimi = moshi_checkpoint.resolve("random:tiny").mimi("cpu")
        generator = torch.Generator().manual_seed(1234)
        with torch.no_grad():
            for module in mimi.modules():
                if isinstance(module, EuclideanCodebook):
                    module.embedding_sum.normal_(generator=generator)
                    # Drops the codebook cached from the small draw.
                    module.register_buffer("_embedding", None, persistent=False)
        return mimi.double()

    return build


@pytest.fixture
def tiny_mimi(make_tiny_mimi: Callable[[], MimiModel]) -> MimiModel:
    return make_tiny_mimi()


@pytest.fixture(scope="session")
def tiny_nemotron(request: pytest.FixtureRequest) -> TinyNemotron:
    """`random:tiny`'s EAR-TTS and codec with its prefilled speaker prompt,
    and NeMo's own answers for one session alone (nemotron_reference.py)."""
    tiers.require(request, tiers.MODELS, "builds Nemotron VoiceChat's EAR-TTS and codec")
    from tests.stage1 import nemotron_reference

    return nemotron_reference.build()


@pytest.fixture
async def heard() -> Heard:
    return Heard()


@pytest.fixture
async def metrics() -> Stage1Metrics:
    return Stage1Metrics(CollectorRegistry())


@pytest.fixture
async def speaker(heard: Heard, metrics: Stage1Metrics) -> AsyncIterator[Speaker]:
    """Sessions on one real scheduler and voice thread, closed after the test."""
    executor = ThreadPoolExecutor(1)
    scheduler = SynthesisScheduler(executor, metrics.queue_depth)
    sessions: list[SynthesisSession] = []

    def make(voice: Voice, **options: Any) -> SynthesisSession:
        session = SynthesisSession(voice, scheduler, metrics, heard, **options)
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        await session.close()
    await scheduler.close()
    executor.shutdown()


# The shipped voice's graph, for the torch engine's tests (test_onnx_torch.py,
# test_voice_batch.py).
@pytest.fixture(scope="session")
def voice_model(request: pytest.FixtureRequest) -> bytes:
    """The shipped Piper voice's ONNX with its alignment output (the phoneme durations)."""
    tiers.require(request, tiers.MODELS, "loads the Piper voice")
    import onnx
    from piper.patch_voice_with_alignment import add_alignment_output

    from antiphon.stage1.backends.piper.assets import locate

    model = onnx.load(str(locate().voice_onnx))
    add_alignment_output(model)
    return model.SerializeToString()


@pytest.fixture(scope="session")
def sentences() -> list[list[int]]:
    """Phoneme ids of real sentences of different lengths (each ends in silence,
    as Piper's do: a padded neighbour's decoder then reaches no audible sample)."""
    from piper import PiperVoice

    from antiphon.stage1.backends.piper.assets import locate

    voice = PiperVoice.load(locate().voice_onnx)
    text = "Sure. The store opens at nine, and it closes at five. Goodbye! Is there more?"
    return [voice.phonemes_to_ids(p) for p in voice.phonemize(text)]
