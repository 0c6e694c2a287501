"""A spoken conversation through all four tiers with the real models.

Silero VAD, Whisper base (CTranslate2), the default LLM (`llm_model`) on vLLM and
the Piper voice, behind the gateway and session service, state in Redis.
The first test drives the stack with the official `openai` SDK, unmodified
(OpenAI's dialect); the others look at the duplex extensions (stage metrics,
word marks, overlap decisions) and speak the duplex dialect (`?duplex=1`).
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from openai import AsyncOpenAI
from stack import LocalStack

from antiphon.common.assets import default_cache_dir
from antiphon.common.audio import resample_pcm16
from antiphon.stage0.assets import locate
from antiphon.stage0.backends.cascade.asr.asr import WhisperAsr
from tests.support.history import stored_items
from tests.support.realtime import RealtimeClient, audio_bytes, duplex_url, of_type
from tests.support.speech import silence, spoken

pytestmark = [pytest.mark.stack, pytest.mark.models]

QUESTION = "What is the capital of France?"
PCM16_24K_BYTES_PER_S = 48000


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z']+", text.lower()))


@pytest.fixture(scope="module")
def whisper() -> WhisperAsr:
    return WhisperAsr(locate(default_cache_dir()).whisper_dir, threads=1)


def _dump(event: Any) -> dict[str, Any]:
    return event.model_dump() if hasattr(event, "model_dump") else dict(event)


async def test_openai_sdk_spoken_question_gets_exactly_one_spoken_answer(
    openai_client: AsyncOpenAI, whisper: WhisperAsr
) -> None:
    question = spoken(QUESTION, 24000)
    async with openai_client.realtime.connect(model="antiphon-cascade") as conn:
        await conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["audio"],
                "instructions": "You are a helpful assistant. Answer in one short sentence.",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "turn_detection": None,
                    },
                    "output": {"format": {"type": "audio/pcm", "rate": 24000}},
                },
            }
        )
        for i in range(0, len(question), 9600):
            await conn.input_audio_buffer.append(
                audio=base64.b64encode(question[i : i + 9600]).decode()
            )
        await conn.input_audio_buffer.commit()
        await conn.response.create()
        events: list[dict[str, Any]] = []
        done_seen = False
        async for event in conn:
            e = _dump(event)
            events.append(e)
            assert e["type"] != "error", e
            done_seen = done_seen or e["type"] == "response.done"
            if done_seen and e["type"] == "rate_limits.updated":
                break
    types = [e["type"] for e in events]
    assert types.count("response.created") == 1
    first = types.index("response.created")
    assert types.index("response.output_audio.delta") > first
    assert types[-2:] == ["response.done", "rate_limits.updated"]
    pcm = audio_bytes(events)
    assert len(pcm) >= PCM16_24K_BYTES_PER_S, "less than 1 s of answer audio"
    deltas = "".join(e["delta"] for e in of_type(events, "response.output_audio_transcript.delta"))
    transcript = of_type(events, "response.output_audio_transcript.done")[0]["transcript"]
    assert deltas == transcript and transcript.strip()
    assert of_type(events, "response.done")[0]["response"]["status"] == "completed"
    # The answer is real speech: Whisper hears the words of the transcript.
    heard = whisper.transcribe(resample_pcm16(pcm, 24000, 16000))
    assert heard.strip()
    overlap = words(heard) & words(transcript)
    assert len(overlap) >= max(1, len(words(transcript)) // 2), (heard, transcript)


async def test_native_lane_answers_speech_followed_by_silence_with_no_commit(
    model_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(duplex_url(model_stack.ports.gateway))
    try:
        await client.open(type="realtime", turn_detection=None, extra_body={"native_duplex": True})
        await client.append(silence(300) + spoken(QUESTION) + silence(1500))
        events = await client.response_cycle(timeout=180)
        types = [e["type"] for e in events]
        assert "input_audio_buffer.commit" not in types
        assert types.count("response.created") == 1
        user = of_type(events, "conversation.item.input_audio_transcription.completed")[0]
        assert {"capital", "france"} <= words(user["transcript"])
        assert of_type(events, "response.done")[0]["response"]["status"] == "completed"
        assert len(audio_bytes(events)) >= PCM16_24K_BYTES_PER_S
    finally:
        await client.close()


async def test_second_turn_prompt_and_history_hold_the_first_turn(
    model_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(duplex_url(model_stack.ports.gateway))
    try:
        created = await client.open(
            type="realtime",
            audio={"input": {"turn_detection": None}},
            extra_body={"return_stage_metrics": True},
        )
        session_id = created["session"]["id"]
        turns = []
        for question in (QUESTION, "And what is the capital of Italy?"):
            await client.append(spoken(question))
            await client.send("input_audio_buffer.commit")
            await client.send("response.create")
            turns.append(await client.response_cycle(timeout=180))
        user1 = of_type(turns[0], "conversation.item.input_audio_transcription.completed")[0]
        answer1 = of_type(turns[0], "response.output_audio_transcript.done")[0]["transcript"]
        done2 = of_type(turns[1], "response.done")[0]["response"]
        prompt = done2["metadata"]["stage_metrics"]["prompt"]
        assert user1["transcript"].strip() in prompt
        assert answer1.strip() in prompt
        assert done2["metadata"]["stage_metrics"]["vllm_ttft_ms"] > 0
        items = await stored_items(model_stack.redis_url, session_id)
        assert [i.role for i in items] == ["user", "assistant", "user", "assistant"]
        assert items[0].content[0].transcript == user1["transcript"]
        assert items[1].content[0].transcript == answer1
    finally:
        await client.close()


async def test_speaking_over_the_answer_cancels_it_and_no_later_audio_arrives(
    model_stack: LocalStack,
) -> None:
    """Barge-in with every real model: Silero hears the user over the assistant."""
    client = await RealtimeClient.connect(duplex_url(model_stack.ports.gateway))
    try:
        await client.open(type="realtime")  # server VAD, interrupt_response by default
        await client.append(
            spoken("Tell me a long story about a dragon and a knight.") + silence(900)
        )
        try:
            first = await client.until(
                lambda e: e["type"] == "response.output_audio.delta", timeout=120
            )
        except TimeoutError:
            raise AssertionError([e["type"] for e in client.events]) from None
        interrupted = first["response_id"]
        await client.append(spoken("Wait, stop please.") + silence(900))
        done = await client.until(lambda e: e["type"] == "response.done", timeout=60)
        assert done["response"]["id"] == interrupted
        assert done["response"]["status"] == "cancelled", done["response"]
        assert done["response"]["status_details"]["reason"] == "barge_in"
        decisions = of_type(client.events, "overlap.decision")
        assert [d["action"] for d in decisions] == ["barge_in"]
        # The interruption is heard as the next turn; nothing of the old reply follows.
        after = len(client.events)
        await client.until(lambda e: e["type"] == "response.done", timeout=120)
        assert not [e for e in client.events[after:] if e.get("response_id") == interrupted]
    finally:
        await client.close()


async def test_truncation_keeps_the_words_piper_had_spoken_and_the_next_prompt_holds_them(
    model_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(duplex_url(model_stack.ports.gateway))
    try:
        await client.open(
            type="realtime",
            audio={"input": {"turn_detection": None}},
            extra_body={"return_stage_metrics": True},
        )
        await client.append(spoken(QUESTION))
        await client.send("input_audio_buffer.commit")
        await client.send("response.create")
        turn = await client.response_cycle(timeout=180)
        item = of_type(turn, "response.output_item.done")[0]["item"]
        said = of_type(turn, "response.output_audio_transcript.done")[0]["transcript"]
        deltas = of_type(turn, "response.output_audio.delta")
        first_marks = deltas[0]["metadata"]["audio_text_marks"]
        # Cut just after the second word of the reply ended in Piper's audio.
        cut_ms = first_marks[1]["audio_end_ms"] + 10
        await client.send(
            "conversation.item.truncate", item_id=item["id"], content_index=0, audio_end_ms=cut_ms
        )
        cut = await client.until(lambda e: e["type"] in ("conversation.item.truncated", "error"))
        assert cut["type"] == "conversation.item.truncated", cut
        kept = cut["event"]["transcript"]
        assert kept and said.startswith(kept) and len(kept) < len(said)
        assert len(kept.split()) == 2  # whole words only, exactly those heard
        await client.append(spoken("Thank you."))
        await client.send("input_audio_buffer.commit")
        await client.send("response.create")
        nxt = await client.response_cycle(timeout=180)
        prompt = of_type(nxt, "response.done")[0]["response"]["metadata"]["stage_metrics"]["prompt"]
        assert kept in prompt and said not in prompt
    finally:
        await client.close()
