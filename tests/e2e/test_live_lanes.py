"""Every lane hears a question spoken into a live microphone, with the real models.

Audio goes out as a microphone sends it: one 200 ms append every 200 ms on
the wall clock, the question and then silence that keeps coming. Each lane
(manual commit, server_vad as OpenAI's default, the native duplex lane) is
asked by two unrelated voices (Piper, espeak-ng) at both input rates. The
user's transcript must carry the question's words, and the answer must be
generated from a prompt that holds what was heard (the prompt rides the
stage metrics of `response.done`, a duplex extension: `?duplex=1`).
"""

from __future__ import annotations

from typing import Any

import pytest
from stack import LocalStack

from tests.support.live import QUESTIONS, live_session, live_turn, words
from tests.support.realtime import RealtimeClient, duplex_url, of_type
from tests.support.speech import VOICES, Voice, silence, spoken

pytestmark = [pytest.mark.stack, pytest.mark.models]


@pytest.mark.parametrize("rate", [16000, 24000])
@pytest.mark.parametrize("voice", VOICES)
@pytest.mark.parametrize("lane", ["manual", "server_vad", "native"])
async def test_lane_hears_a_live_question(
    model_stack: LocalStack, lane: str, voice: Voice, rate: int
) -> None:
    events = await live_turn(model_stack, lane, voice, rate)
    if lane == "server_vad":
        types = [e["type"] for e in events]
        assert "input_audio_buffer.commit" not in types
        assert types.index("input_audio_buffer.speech_started") < types.index(
            "input_audio_buffer.speech_stopped"
        )


@pytest.mark.parametrize(
    "turn_detection",
    [
        {"type": "server_vad"},
        {"type": "server_vad", "silence_duration_ms": 300, "prefix_padding_ms": 100},
        {"type": "server_vad", "silence_duration_ms": 1200, "prefix_padding_ms": 800},
        {"type": "semantic_vad"},
        {"type": "semantic_vad", "eagerness": "high"},
    ],
    ids=["explicit", "short-silence", "long-silence", "semantic", "semantic-high"],
)
async def test_server_vad_hears_a_live_question_whatever_its_timing_settings(
    model_stack: LocalStack, turn_detection: dict[str, Any]
) -> None:
    await live_turn(model_stack, "server_vad", "espeak", 24000, turn_detection)


async def test_server_vad_hears_a_question_burst_faster_than_real_time(
    model_stack: LocalStack,
) -> None:
    """One extra case, never the only one: a client that sends its audio at once."""
    question = QUESTIONS["espeak"]
    client = await RealtimeClient.connect(duplex_url(model_stack.ports.gateway))
    try:
        await client.open(**live_session("server_vad", 24000))
        await client.append(silence(400) + spoken(question.text, 24000, "espeak") + silence(1500))
        events = await client.response_cycle(timeout=180)
    finally:
        await client.close()
    heard = of_type(events, "conversation.item.input_audio_transcription.completed")
    assert heard and question.words <= words(heard[0]["transcript"]), heard
