"""Partial transcripts while the user speaks, on the real stack and models.

A long request goes into a live microphone (a 200 ms append every 200 ms,
then silence that keeps coming). While it is spoken, what the server hears
so far goes out as `conversation.item.input_audio_transcription.delta`; the
deltas of the item, joined, are its `...completed` transcript (or, where the
final pass revised a streamed word, its first words: a delta is never taken
back). In the three
lanes that hear speech by themselves, each through a client a user has:

- server_vad (OpenAI's default) through the stock `openai` SDK, its events
  parsed into the SDK's own models;
- semantic_vad through a raw socket whose every frame the SDK's strict
  models judge;
- the native duplex lane through our `DuplexClient`.
"""

from __future__ import annotations

import asyncio
import base64
import re
from typing import Any

import pytest
from openai import AsyncOpenAI
from openai.types.realtime import ConversationItemInputAudioTranscriptionDeltaEvent
from stack import LocalStack

from antiphon.client import DuplexClient, EventCollector, Microphone
from antiphon.client.events import InputTranscript, InputTranscriptDelta
from tests.support.live import words
from tests.support.realtime import Event, RealtimeClient, of_type, realtime_url
from tests.support.speech import Voice, spoken

pytestmark = [pytest.mark.stack, pytest.mark.models]

# About five seconds of speech: several partial passes (one a second) agree
# on words before it ends.
REQUEST = "Please tell me about the history of Paris and why it became the capital of France."
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"


def session(rate: int, turn_detection: dict[str, Any] | None) -> dict[str, Any]:
    audio_in: dict[str, Any] = {"format": {"type": "audio/pcm", "rate": rate}}
    if turn_detection is not None:
        audio_in["turn_detection"] = turn_detection
    return {"type": "realtime", "audio": {"input": audio_in}}


def streamed_agrees(joined: str, transcript: str) -> bool:
    """The deltas joined are the whole transcript; or, where the final pass
    revised a streamed word (Whisper adding a comma, say: a delta is never
    taken back, turns.py), they are its first words."""
    if joined == transcript:
        return True
    said = re.findall(r"[a-z']+", joined.lower())
    final = re.findall(r"[a-z']+", transcript.lower())
    return bool(said) and final[: len(said)] == said


def check_streamed(events: list[Event], *, ended: str) -> None:
    """The item's deltas: some while the user spoke (before the `ended` event),
    all naming the item, joined its whole transcript, all before it."""
    types = [e["type"] for e in events]
    (completed,) = of_type(events, COMPLETED)
    deltas = of_type(events, DELTA)
    assert {d["item_id"] for d in deltas} == {completed["item_id"]}, deltas
    joined = "".join(d["delta"] for d in deltas)
    assert streamed_agrees(joined, completed["transcript"]), (deltas, completed)
    assert {"paris", "capital"} <= words(completed["transcript"])
    assert types.index(DELTA) < types.index(ended), types
    last_delta = len(types) - 1 - types[::-1].index(DELTA)
    assert last_delta < types.index(COMPLETED)


class SdkMicrophone:
    """A microphone's sink on the stock SDK's connection."""

    def __init__(self, conn: Any, rate: int) -> None:
        self._conn = conn
        self.input_rate = rate

    async def append_audio(self, pcm16: bytes) -> None:
        await self._conn.input_audio_buffer.append(audio=base64.b64encode(pcm16).decode())


async def test_server_vad_streams_partials_to_the_stock_openai_sdk(
    openai_client: AsyncOpenAI,
) -> None:
    rate = 24000
    events: list[Event] = []
    async with openai_client.realtime.connect(model="antiphon-cascade") as conn:
        await conn.session.update(session=session(rate, None))  # type: ignore[arg-type]
        async with Microphone(SdkMicrophone(conn, rate), rate) as mic:
            said = asyncio.create_task(mic.say(spoken(REQUEST, rate, "piper")))
            async for event in conn:
                if isinstance(event, ConversationItemInputAudioTranscriptionDeltaEvent):
                    assert event.delta is not None  # the SDK's own model of it
                events.append(event.model_dump(mode="json"))
                assert event.type != "error", event
                if event.type == COMPLETED:
                    break
            said.cancel()
    check_streamed(events, ended="input_audio_buffer.speech_stopped")


async def test_semantic_vad_streams_partials_every_frame_valid(model_stack: LocalStack) -> None:
    rate = 16000
    client = await RealtimeClient.connect(realtime_url(model_stack.ports.gateway))
    try:
        created = await client.open(**session(rate, {"type": "semantic_vad"}))
        assert created["type"] == "session.created", created
        async with Microphone(client, rate) as mic:
            await mic.say(spoken(REQUEST, rate, "espeak"))
            await client.until(lambda e: e["type"] == COMPLETED, timeout=120)
    finally:
        await client.close()
    assert not of_type(client.events, "error"), of_type(client.events, "error")
    check_streamed(client.events, ended="input_audio_buffer.speech_stopped")
    (started,) = of_type(client.events, "input_audio_buffer.speech_started")
    assert started["item_id"] == of_type(client.events, COMPLETED)[0]["item_id"]


@pytest.mark.parametrize(("voice", "rate"), [("piper", 16000), ("espeak", 24000)])
async def test_the_native_lane_streams_partials_to_our_client(
    model_stack: LocalStack, voice: Voice, rate: int
) -> None:
    collector = EventCollector()
    opening = {
        **session(rate, None),
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": rate}, "turn_detection": None}},
        "extra_body": {"native_duplex": True},
    }
    url = f"ws://127.0.0.1:{model_stack.ports.gateway}/v1/realtime?duplex=1"
    async with DuplexClient(url, session=opening) as client:
        client.add_listener(collector.record)
        async with Microphone(client, rate) as mic:
            await mic.say(spoken(REQUEST, rate, voice))
            await client.wait_for(InputTranscript.types[0], timeout=120)
    typed = collector.events
    deltas = [e for e in typed if isinstance(e, InputTranscriptDelta)]
    (heard,) = [e for e in typed if isinstance(e, InputTranscript)]
    assert streamed_agrees("".join(d.delta for d in deltas), heard.transcript)
    # The native lane names the item at its commit: the first delta came while
    # the user still spoke, before it.
    check_streamed([e.raw for e in typed], ended="input_audio_buffer.committed")
