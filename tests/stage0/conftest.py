"""Shared, expensive stage0 fixtures: prepared assets, one vLLM engine, spoken audio."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import wave
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

# Before anything imports huggingface_hub: tests must never reach a model hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np
import numpy.typing as npt
import pytest

from antiphon.common.assets import default_cache_dir
from antiphon.stage0.assets import Stage0Assets, prepare
from antiphon.stage0.backends.cascade.llm.cpu_choice import choose_for
from antiphon.stage0.settings import Stage0Settings
from tests.support import tiers

if TYPE_CHECKING:
    from antiphon.stage0.backends.cascade.models import Llm

SAMPLE_RATE = 16_000


@pytest.fixture(scope="session")
def model_cache() -> Path:
    """The real cache (`ANTIPHON_MODEL_CACHE` or the default), so `make models` is reused."""
    return default_cache_dir()


@pytest.fixture(scope="session")
def assets(request: pytest.FixtureRequest, model_cache: Path) -> Stage0Assets:
    """The prepared models (converted on first use): what every model test starts from."""
    tiers.require(request, tiers.MODELS, "prepares the stage0 models")
    settings = Stage0Settings()
    return prepare(model_cache, settings.llm_model, choose_for(settings).engine)


@pytest.fixture(scope="module")
async def llm_engine(assets: Stage0Assets) -> AsyncIterator[Llm]:
    """The LLM on the engine a worker with the default settings picks on this
    machine: for one module, not the session (a vLLM engine holds 6.5 GB; kept
    to the suite's end, it left the stacks too little on a 24 GB machine)."""
    # Imported here: the engines' imports are slow and only the LLM tests need them.
    from antiphon.stage0.backends.cascade.models import start_llm

    settings = Stage0Settings()
    engine = await start_llm(settings, choose_for(settings), assets.llm_model)
    try:
        yield engine
    finally:
        await engine.shutdown()


def _resample(samples: npt.NDArray[np.float64], rate: int) -> npt.NDArray[np.float64]:
    # Linear interpolation is plenty for synthetic speech fed to VAD and Whisper.
    n = len(samples) * SAMPLE_RATE // rate
    positions = np.arange(n) * (rate / SAMPLE_RATE)
    resampled: npt.NDArray[np.float64] = np.interp(positions, np.arange(len(samples)), samples)
    return resampled


@pytest.fixture(scope="session")
def say() -> Callable[[str], bytes]:
    """Text -> PCM16 mono 16 kHz speech, spoken by espeak-ng."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        pytest.fail("espeak-ng is not installed: apt-get install -y espeak-ng")

    def speak(text: str) -> bytes:
        wav = subprocess.run(
            [espeak, "-v", "en-us", "-s", "150", "--stdout", text],
            check=True,
            capture_output=True,
        ).stdout
        with wave.open(io.BytesIO(wav)) as w:
            rate = w.getframerate()
            raw = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        pcm = _resample(raw.astype(np.float64), rate)
        return np.clip(pcm, -32768, 32767).astype("<i2").tobytes()

    return speak
