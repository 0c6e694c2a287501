"""Whisper in torch (whisper_torch.py) and its batching across sessions
(asr_batch.py), on the shipped Whisper base and real speech, on this CPU:
the same code a GPU worker runs, checked against faster-whisper's features
and CTranslate2's transcripts of the same model."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest
import torch
from faster_whisper.feature_extractor import FeatureExtractor
from pydantic import ValidationError

from antiphon.stage0.assets import Stage0Assets
from antiphon.stage0.backends.cascade.asr.asr import WhisperAsr
from antiphon.stage0.backends.cascade.asr.asr_batch import BatchedAsr
from antiphon.stage0.backends.cascade.asr.whisper_graphs import DecodeGraphs
from antiphon.stage0.backends.cascade.asr.whisper_torch import TorchWhisper, log_mel, mel_filters
from antiphon.stage0.backends.cascade.asr.whisper_weights import read_ct2
from antiphon.stage0.settings import Stage0Settings
from tests.support.speech import Voice, spoken

pytestmark = pytest.mark.models

SAID: list[tuple[str, Voice]] = [
    ("What is the capital of France?", "piper"),
    ("Please tell me about the history of Paris.", "espeak"),
    ("Hello there.", "piper"),
]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


@pytest.fixture(scope="module")
def whisper(assets: Stage0Assets) -> TorchWhisper:
    torch.set_num_threads(1)
    return TorchWhisper.load(assets.whisper_dir)


@pytest.fixture(scope="module")
def speech() -> list[bytes]:
    return [spoken(text, 16000, voice) for text, voice in SAID]


def test_features_are_faster_whispers(speech: list[bytes]) -> None:
    reference = FeatureExtractor(feature_size=80)
    assert np.abs(mel_filters(80) - reference.mel_filters).max() < 1e-6
    audio = np.frombuffer(speech[0], "<i2").astype(np.float32) / 32768
    ours = log_mel(torch.from_numpy(audio)[None], torch.from_numpy(mel_filters(80)))[0]
    theirs = reference(audio)
    assert ours.shape == theirs.shape
    assert np.abs(ours.numpy() - theirs).max() < 1e-3


def test_the_ct2_file_is_read_whole(assets: Stage0Assets) -> None:
    weights = read_ct2(assets.whisper_dir / "model.bin")
    assert weights["encoder/conv1/weight"].shape == (512, 80, 3)
    # CTranslate2 ties the output projection to the embeddings by an alias.
    assert weights["decoder/projection/weight"] is weights["decoder/embeddings/weight"]
    assert {f"encoder/layer_{i}/ffn/linear_0/weight" for i in range(6)} <= set(weights)


def test_a_batch_hears_what_ctranslate2_hears_and_each_row_as_alone(
    assets: Stage0Assets, whisper: TorchWhisper, speech: list[bytes]
) -> None:
    ct2 = WhisperAsr(assets.whisper_dir, threads=1)
    batch = whisper.transcribe([*speech, bytes(16000 * 2), b""])
    assert batch[-2:] == ["", ""]  # a second of silence, and no audio
    for text, expected in zip(batch, speech, strict=False):
        assert words(text) == words(ct2.transcribe(expected)), text
    assert whisper.transcribe([speech[2]]) == [batch[2]]


async def test_sessions_asking_at_once_share_batches(
    whisper: TorchWhisper, speech: list[bytes]
) -> None:
    """Callers at once share one batch; callers that come while it runs share
    the next (nobody waits for company). Each gets its own utterance's text."""
    sizes: list[int] = []
    asr = BatchedAsr(whisper, max_batch=8, observe_batch=sizes.append)
    order = [0, 1, 2, 2, 1]
    try:
        together = await asyncio.gather(*(asr.transcribe(speech[i]) for i in order))
        first = asyncio.ensure_future(asr.transcribe(speech[2]))
        await asyncio.sleep(0)  # its batch has started, alone
        later = await asyncio.gather(*(asr.transcribe(speech[i]) for i in order))
        await first
    finally:
        await asr.close()
    assert sizes == [5, 1, 5]
    alone = whisper.transcribe(speech)
    assert together == later == [alone[i] for i in order]


async def test_a_caller_that_gave_up_costs_the_batch_nothing(
    whisper: TorchWhisper, speech: list[bytes]
) -> None:
    sizes: list[int] = []
    asr = BatchedAsr(whisper, max_batch=8, observe_batch=sizes.append)
    try:
        first = asyncio.ensure_future(asr.transcribe(speech[2]))
        await asyncio.sleep(0)  # the first batch has started
        dropped = asyncio.ensure_future(asr.transcribe(speech[0]))
        kept = asyncio.ensure_future(asr.transcribe(speech[2]))
        await asyncio.sleep(0)
        dropped.cancel()
        assert await first == await kept
    finally:
        await asr.close()
    assert sizes == [1, 1]


def test_a_batch_in_a_graphs_padded_buffers_hears_what_it_hears_alone(
    assets: Stage0Assets, whisper: TorchWhisper, speech: list[bytes]
) -> None:
    """DecodeGraphs' buffers hold more rows and frames than a batch, and the
    last batch's values: the padding must change nothing. (The recording
    itself needs a GPU; `capture=False` steps the same buffers op by op.)"""
    runs: list[str] = []
    padded = TorchWhisper.load(assets.whisper_dir)
    padded.graphs = DecodeGraphs(
        padded, capture=False, max_rows=4, max_frames=600, observe_run=runs.append
    )
    alone = whisper.transcribe(speech)
    assert padded.transcribe(speech) == alone  # 3 rows in the bucket of 4
    assert padded.transcribe([speech[2]]) == [alone[2]]  # 1 row, after 3 longer ones
    assert padded.transcribe([*speech, *speech[:2]]) == [*alone, *alone[:2]]  # 5 rows: past it
    long = speech[1] * 3  # 12 s of speech and 4 of silence: 800 frames
    assert words(padded.transcribe([long])[0])[:4] == words(alone[1])[:4]
    assert runs == ["graphs", "graphs", "ops", "ops"]


def test_graphs_are_recorded_on_a_cuda_device_only(whisper: TorchWhisper) -> None:
    with pytest.raises(ValueError, match="cuda"):
        DecodeGraphs(whisper, capture=True)


@pytest.mark.parametrize(
    "settings",
    [{"asr_cuda_graphs": True}, {"asr_cuda_graphs": True, "asr_engine": "torch"}],
)
def test_asr_cuda_graphs_need_torch_whisper_on_a_cuda_device(settings: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="asr_cuda_graphs needs"):
        Stage0Settings(**settings)  # type: ignore[arg-type]
    assert Stage0Settings(asr_engine="torch", asr_device="cuda:1", asr_cuda_graphs=True)
