"""The GPU engines through the whole stack, on the CPU where the tests run.

A GPU deployment (`values-gpu.yaml`) runs Whisper with `asr_engine: torch`,
Smart Turn with `turn_engine: torch` and Piper with `tts_engine: torch`:
every session's utterances, end-of-turn windows and clauses in shared
batches. Each is one setting away from the CPU default and runs on a CPU
too, so the code a GPU runs is exercised here: a stack with the three
engines on torch hears a question spoken into a live microphone (OpenAI's
default lane and semantic_vad, two voices at both rates), streams partial
transcripts while it is spoken, and answers in speech, each step through
the batching engines (their batch-size metrics count them).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from stack import LocalStack, Ports

from bench.lib.prometheus import scrape
from tests.support.live import live_turn
from tests.support.realtime import audio_bytes, of_type
from tests.support.speech import Voice
from tests.support.stacks import started

pytestmark = [pytest.mark.stack, pytest.mark.models]

TORCH_ENGINES = {
    "ANTIPHON_ASR_ENGINE": "torch",
    "ANTIPHON_ASR_DEVICE": "cpu",
    "ANTIPHON_TURN_ENGINE": "torch",
    "ANTIPHON_TURN_DEVICE": "cpu",
    "ANTIPHON_TTS_ENGINE": "torch",
    "ANTIPHON_TTS_DEVICE": "cpu",
}


@pytest.fixture(scope="module")
def torch_stack(request: pytest.FixtureRequest) -> Iterator[LocalStack]:
    # Its own Redis: no other stack's workers in its registry.
    stack = LocalStack(ports=Ports.free(), extra_env=TORCH_ENGINES)
    with started(request, stack, timeout_s=600):
        yield stack


def _batches(stack: LocalStack) -> tuple[float, float, float]:
    """Whisper and Smart Turn batches run by stage0 and voice batches by stage1, so far."""
    samples = scrape([stack.ports.stage0_metrics, stack.ports.stage1_metrics])
    return (
        samples.get("antiphon_stage0_asr_batch_size_count", 0.0),
        samples.get("antiphon_stage0_turn_batch_size_count", 0.0),
        samples.get("antiphon_stage1_tts_batch_size_count", 0.0),
    )


@pytest.mark.parametrize(
    ("detector", "voice", "rate"),
    [
        ("server_vad", "piper", 16000),
        ("server_vad", "espeak", 24000),
        ("semantic_vad", "piper", 24000),
        ("semantic_vad", "espeak", 16000),
    ],
)
async def test_a_live_question_is_heard_and_answered_through_the_batching_engines(
    torch_stack: LocalStack, detector: str, voice: Voice, rate: int
) -> None:
    asr_before, turn_before, tts_before = _batches(torch_stack)
    events = await live_turn(torch_stack, "server_vad", voice, rate, {"type": detector})
    (heard,) = of_type(events, "conversation.item.input_audio_transcription.completed")
    deltas = of_type(events, "conversation.item.input_audio_transcription.delta")
    assert "".join(d["delta"] for d in deltas) == heard["transcript"]
    pcm = np.frombuffer(audio_bytes(events), np.int16)
    assert len(pcm) > 24000 * 0.5, len(pcm)  # half a second of answer at least
    assert np.sqrt(np.mean(pcm.astype(np.float64) ** 2)) > 300  # speech, not silence
    asr_after, turn_after, tts_after = _batches(torch_stack)
    assert asr_after > asr_before, "stage0 heard it without its Whisper batches"
    assert tts_after > tts_before, "stage1 spoke without its voice batches"
    if detector == "semantic_vad":
        assert turn_after > turn_before, "semantic_vad ended the turn without Smart Turn"
