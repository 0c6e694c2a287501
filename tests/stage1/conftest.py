"""One Piper voice per test session (loading it takes about a second); a
fresh tiny Mimi decoder per test (it builds in milliseconds)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.support import tiers

if TYPE_CHECKING:
    from moshi.models.compression import MimiModel

    from antiphon.stage1.tts import PiperTts


@pytest.fixture(scope="session")
def piper_tts(request: pytest.FixtureRequest) -> PiperTts:
    tiers.require(request, tiers.MODELS, "loads the Piper voice")
    # Imported here so that collecting the model-free tests needs no Piper.
    from antiphon.stage1.assets import locate
    from antiphon.stage1.tts import PiperTts

    assets = locate()
    return PiperTts(assets.voice_onnx, assets.voice_config, threads=1, out_rate=24000)


@pytest.fixture
def tiny_mimi(request: pytest.FixtureRequest) -> MimiModel:
    """The tiny random Mimi (`random:tiny`), seeded, in float64: batched and
    single-row kernels then agree to the last bit, so rows compare exactly."""
    tiers.require(request, tiers.MODELS, "builds a Mimi decoder")
    from antiphon.common import moshi_checkpoint

    moshi_checkpoint.disable_compile_by_default()
    import torch

    torch.manual_seed(1234)
    return moshi_checkpoint.resolve("random:tiny").mimi("cpu").double()
