"""One Piper voice per test session: loading it takes about a second."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.support import tiers

if TYPE_CHECKING:
    from antiphon.stage1.tts import PiperTts


@pytest.fixture(scope="session")
def piper_tts(request: pytest.FixtureRequest) -> PiperTts:
    tiers.require(request, tiers.MODELS, "loads the Piper voice")
    # Imported here so that collecting the model-free tests needs no Piper.
    from antiphon.stage1.assets import locate
    from antiphon.stage1.tts import PiperTts

    assets = locate()
    return PiperTts(assets.voice_onnx, assets.voice_config, threads=1, out_rate=24000)
