"""One golden wire transcript per scenario and dialect (reference: "the golden transcript test").

Each scenario is driven end to end over a real WebSocket on the synthetic
stack and its whole event sequence compared with
`golden/<dialect>/<scenario>.json`, ignoring ids, sequence numbers, timings
and audio bytes (tests/support/golden.py says exactly what and why).
`golden/openai/` holds OpenAI's dialect (`/v1/realtime`), `golden/duplex/`
the duplex extensions (`?duplex=1`).

Every frame of every OpenAI-dialect transcript is replayed through the
`openai` SDK's models in strict mode (no stack needed), so a new event
shape cannot reach the plain dialect without a reviewed golden diff that
also passes them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis
from stack import LocalStack

from antiphon.session.state import keys
from tests.support import golden, openai_models, reference
from tests.support.realtime import MANUAL, RealtimeClient, ask, duplex_url, of_type
from tests.support.speech import silence, spoken, weather_question

SERVER_VAD = {"type": "realtime"}  # turn_detection absent: OpenAI's default, server VAD
LISTENING_VAD = {
    "type": "realtime",
    "overlap_policy": "listen_only",
    "audio": {"input": {"turn_detection": {"type": "server_vad", "interrupt_response": False}}},
}
AUDIO = "response.output_audio.delta"
TRANSCRIPT = "response.output_audio_transcript.delta"
USER_TEXT = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}


# ----------------------------------------------------- the replay (no stack)
@pytest.mark.parametrize("name", sorted(golden.transcripts("openai")))
def test_every_frame_of_the_openai_transcripts_validates_strictly(name: str) -> None:
    for i, frame in enumerate(golden.transcripts("openai")[name]):
        assert openai_models.violations(frame) == [], (name, i, frame)


def test_the_openai_transcripts_open_on_connect_and_cover_the_surface() -> None:
    transcripts = golden.transcripts("openai")
    for name, frames in transcripts.items():
        assert frames[0]["type"] == "session.created", name
    seen = {frame["type"] for frames in transcripts.values() for frame in frames}
    # Every OpenAI server type this stack can produce is pinned by some scenario.
    assert seen >= {
        "session.created",
        "session.updated",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.created",
        "conversation.item.done",
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.retrieved",
        "conversation.item.deleted",
        "conversation.item.truncated",
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_audio.delta",
        "response.output_audio_transcript.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.done",
        "rate_limits.updated",
        "output_audio_buffer.cleared",
        "error",
    }, sorted(seen)


def test_the_duplex_transcripts_speak_the_reference_only() -> None:
    tiers = reference.server_tiers()
    seen = {f["type"] for frames in golden.transcripts("duplex").values() for f in frames}
    assert seen <= set(tiers)
    assert {t for t in seen if tiers[t] == "3"} >= {"response.speak", "overlap.decision"}


# --------------------------------------------------------- OpenAI's dialect
@pytest.mark.stack
@pytest.mark.models
async def test_plain_turn(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    # LiveKit names each request in its metadata and waits for the echo.
    await ask(client, weather_question(), metadata={"client_event_id": "evt_reply_1"})
    golden.check("openai", "plain_turn", client.events)


@pytest.mark.stack
@pytest.mark.models
async def test_text_only_response(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await ask(client, weather_question(), output_modalities=["text"])
    golden.check("openai", "text_only_response", client.events)


@pytest.mark.stack
@pytest.mark.models
async def test_server_vad_turn(client: RealtimeClient) -> None:
    await client.open(**SERVER_VAD)
    await client.append(weather_question())
    await client.response_cycle()
    golden.check("openai", "server_vad_turn", client.events)


@pytest.mark.stack
@pytest.mark.models
async def test_barge_in(slow_client: RealtimeClient) -> None:
    """Speech over the answer cancels it (`turn_detected`); the new turn is answered."""
    await slow_client.open(**SERVER_VAD)
    await slow_client.append(weather_question())
    await slow_client.until(lambda e: e["type"] == AUDIO)
    await slow_client.append(spoken("Wait, what about tomorrow?") + silence(900))
    await slow_client.response_cycle()
    await slow_client.response_cycle()
    golden.check("openai", "barge_in", slow_client.events)


@pytest.mark.stack
@pytest.mark.models
@pytest.mark.parametrize(
    ("name", "event", "reply"),
    [
        ("response_cancel", "response.cancel", "response.done"),
        ("output_audio_clear", "output_audio_buffer.clear", "output_audio_buffer.cleared"),
    ],
)
async def test_client_interrupts(
    slow_client: RealtimeClient, name: str, event: str, reply: str
) -> None:
    await slow_client.open(**MANUAL)
    await slow_client.append(weather_question())
    await slow_client.send("input_audio_buffer.commit")
    await slow_client.send("response.create")
    await slow_client.until(lambda e: e["type"] == AUDIO)
    await slow_client.send(event)
    await slow_client.response_cycle()
    if not of_type(slow_client.events, reply):
        await slow_client.until(lambda e: e["type"] == reply)
    golden.check("openai", name, slow_client.events)


@pytest.mark.stack
@pytest.mark.models
async def test_truncation(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    events = await ask(client, weather_question())
    item_id = of_type(events, "response.output_item.done")[0]["item"]["id"]
    await client.send(
        "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=1500
    )
    await client.until(lambda e: e["type"] in ("conversation.item.truncated", "error"))
    golden.check("openai", "truncation", client.events)


async def _items(client: RealtimeClient) -> None:
    await client.send("conversation.item.create", item=USER_TEXT)
    added = await client.until(lambda e: e["type"] in ("conversation.item.done", "error"))
    item_id = added["item"]["id"]
    await client.send("conversation.item.retrieve", item_id=item_id)
    await client.until(lambda e: e["type"] in ("conversation.item.retrieved", "error"))
    await client.send("conversation.item.delete", item_id=item_id)
    await client.until(lambda e: e["type"] in ("conversation.item.deleted", "error"))
    await client.send("conversation.item.retrieve", item_id=item_id)
    await client.until(lambda e: e["type"] == "error")


@pytest.mark.stack
async def test_item_create_retrieve_delete(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await _items(client)
    golden.check("openai", "item_create_retrieve_delete", client.events)


@pytest.mark.stack
async def test_function_call_items(client: RealtimeClient) -> None:
    """A tool call and its result from the client's history, then an answer."""
    await client.open(**MANUAL)
    call: dict[str, Any] = {
        "type": "function_call",
        "call_id": "call_weather_1",
        "name": "get_weather",
        "arguments": '{"city":"Paris"}',
    }
    await client.send("conversation.item.create", item=call)
    await client.until(lambda e: e["type"] in ("conversation.item.done", "error"))
    output = {"type": "function_call_output", "call_id": "call_weather_1", "output": '{"c":21}'}
    await client.send("conversation.item.create", item=output)
    await client.until(lambda e: e["type"] in ("conversation.item.done", "error"))
    await client.send("response.create", response={"output_modalities": ["text"]})
    await client.response_cycle()
    golden.check("openai", "function_call_items", client.events)


@pytest.mark.stack
async def test_refusals(client: RealtimeClient) -> None:
    """Each refused event is one OpenAI `error`, and changes nothing."""
    await client.open(**MANUAL)
    refused: list[tuple[str, dict[str, Any]]] = [
        ("input_audio_buffer.commit", {}),
        ("session.heartbeat", {}),  # a duplex extension: not OpenAI's
        ("input_audio_buffer.append", {"audio": "***"}),
        ("session.update", {"session": {"temperature": 9.0}}),
        ("response.cancel", {}),
        ("conversation.item.delete", {"item_id": "item_missing"}),
    ]
    for i, (etype, fields) in enumerate(refused):
        await client.send(etype, event_id=f"evt_refused_{i}", **fields)
        await client.until(lambda e: e["type"] == "error")
    golden.check("openai", "refusals", client.events)


# ----------------------------------------------------------- duplex dialect
@pytest.mark.stack
@pytest.mark.models
async def test_duplex_plain_turn(duplex_client: RealtimeClient) -> None:
    await duplex_client.open(**MANUAL)
    await ask(duplex_client, weather_question(), metadata={"client_event_id": "evt_reply_1"})
    golden.check("duplex", "plain_turn", duplex_client.events)


@pytest.mark.stack
async def test_duplex_item_create_retrieve_delete(duplex_client: RealtimeClient) -> None:
    await duplex_client.open(**MANUAL)
    await _items(duplex_client)
    golden.check("duplex", "item_create_retrieve_delete", duplex_client.events)


@pytest.mark.stack
@pytest.mark.models
async def test_duplex_barge_in(slow_duplex_client: RealtimeClient) -> None:
    """The client's own VAD barges in (`barge_in`): an overlap decision, then the cancel."""
    c = slow_duplex_client
    await c.open(**MANUAL)
    await c.append(weather_question())
    await c.send("input_audio_buffer.commit")
    await c.send("response.create")
    await c.until(lambda e: e["type"] == AUDIO)
    await c.send("barge_in")
    await c.response_cycle()
    golden.check("duplex", "barge_in", c.events)


@pytest.mark.stack
@pytest.mark.models
async def test_duplex_deferred_overlap(slow_duplex_client: RealtimeClient) -> None:
    c = slow_duplex_client
    await c.open(**LISTENING_VAD)
    await c.append(weather_question())
    await c.until(lambda e: e["type"] == AUDIO)
    # A real question over the answer: heard, kept, and answered after it.
    await c.append(spoken("And what about tomorrow in the mountains?") + silence(900))
    await c.response_cycle()
    await c.response_cycle()
    golden.check("duplex", "deferred_overlap", c.events)


@pytest.mark.stack
@pytest.mark.models
async def test_duplex_listen_only_short_overlap(slow_duplex_client: RealtimeClient) -> None:
    c = slow_duplex_client
    await c.open(**LISTENING_VAD)
    await c.append(weather_question())
    await c.until(lambda e: e["type"] == AUDIO)
    await c.append(spoken("Okay.") + silence(900))  # a listener's acknowledgement
    await c.response_cycle()
    golden.check("duplex", "listen_only_short_overlap", c.events)


async def _detached(stack: LocalStack, session_id: str) -> None:
    """Until the session let its stage0 slot go (it heard of the drop)."""
    r = aioredis.Redis.from_url(stack.redis_url)
    try:
        for _ in range(200):
            bound = await r.hget(keys.session(session_id), "stage0")  # type: ignore[misc]
            if bound == b"":
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the session never detached")
    finally:
        await r.aclose()


@pytest.mark.stack
@pytest.mark.models
async def test_duplex_resume_mid_response(slow_synthetic_stack: LocalStack) -> None:
    """Resuming is the duplex dialect's: the token rides its `session.created`."""
    first = await RealtimeClient.connect(duplex_url(slow_synthetic_stack.ports.gateway))
    created = await first.open(**MANUAL)
    await first.append(weather_question())
    await first.send("input_audio_buffer.commit")
    await first.send("response.create")
    # A whole chunk heard (its audio and its transcript), so the transcript
    # holds whole pairs whatever the scheduling.
    await first.until(lambda e: e["type"] == TRANSCRIPT)
    # The network drops (no close frame): the session lives on, resumable,
    # and the reply it could not finish without its stage slots ends.
    first.ws.transport.abort()
    session = created["session"]
    await _detached(slow_synthetic_stack, session["id"])
    second = await RealtimeClient.connect(
        duplex_url(slow_synthetic_stack.ports.gateway, "?autostart=0")
    )
    try:
        await second.send(
            "session.resume",
            session_id=session["id"],
            incarnation=created["incarnation"],
            resume_token=created["resume_token"],
            last_received_server_event_seq=first.events[-1]["server_event_seq"],
        )
        await second.response_cycle()
        seqs = [e["server_event_seq"] for e in second.events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        golden.check("duplex", "resume_mid_response", first.events + second.events)
    finally:
        await second.close()
