"""A spoken turn into a live microphone, with the real models: the question,
what it must be heard as, and one turn in a lane, checked as every lane's
tests check it (tests/e2e/test_live_lanes.py says how)."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from stack import LocalStack

from antiphon.client import Microphone
from tests.support.realtime import Event, RealtimeClient, audio_bytes, duplex_url, of_type
from tests.support.speech import Voice, spoken


@dataclass(frozen=True)
class Question:
    text: str
    words: frozenset[str]


QUESTIONS = {
    "piper": Question("What is the capital of France?", frozenset({"capital", "france"})),
    "espeak": Question("What color is the sky on a sunny day?", frozenset({"sky", "sunny"})),
}

# Asked where a test talks over the answer: it plays for 40 s and more on CI's
# two cores, so the answer is still playing when the test cuts in.
STORY = "Tell me a long story about a dragon and a knight."


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


def live_session(
    lane: str, rate: int, turn_detection: dict[str, Any] | None = None
) -> dict[str, Any]:
    audio_in: dict[str, Any] = {"format": {"type": "audio/pcm", "rate": rate}}
    if lane != "server_vad":
        audio_in["turn_detection"] = None
    elif turn_detection is not None:
        audio_in["turn_detection"] = turn_detection
    # Absent turn_detection is OpenAI's default: server_vad.
    extra: dict[str, Any] = {"return_stage_metrics": True}
    if lane == "native":
        extra["native_duplex"] = True
    return {"type": "realtime", "audio": {"input": audio_in}, "extra_body": extra}


async def live_turn(
    stack: LocalStack,
    lane: str,
    voice: Voice,
    rate: int,
    turn_detection: dict[str, Any] | None = None,
) -> list[Event]:
    question = QUESTIONS[voice]
    client = await RealtimeClient.connect(duplex_url(stack.ports.gateway))
    try:
        created = await client.open(**live_session(lane, rate, turn_detection))
        assert created["type"] == "session.created", created
        async with Microphone(client, rate) as mic:
            await asyncio.sleep(0.6)  # the microphone is live before the user speaks
            await mic.say(spoken(question.text, rate, voice))
            if lane == "manual":
                # Push-to-talk: released as the question ends; silence keeps flowing.
                await client.send("input_audio_buffer.commit")
                await client.send("response.create")
            events = await client.response_cycle(timeout=180)
    finally:
        await client.close()
    errors = of_type(client.events, "error")
    assert not errors, errors
    heard = of_type(events, "conversation.item.input_audio_transcription.completed")
    assert heard, [e["type"] for e in events]
    assert question.words <= words(heard[0]["transcript"]), heard[0]["transcript"]
    done = of_type(events, "response.done")[-1]["response"]
    assert done["status"] == "completed", done
    # The answer is to what was heard: its prompt holds the user's words.
    assert heard[0]["transcript"].strip() in done["metadata"]["stage_metrics"]["prompt"]
    assert audio_bytes(events), "no answer audio"
    return client.events
