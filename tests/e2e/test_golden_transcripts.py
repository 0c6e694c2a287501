"""One golden wire transcript per scenario (reference: "the golden transcript test").

Each test drives a scenario end to end over a real WebSocket on the
synthetic stack and compares the whole event sequence with
`golden/<scenario>.json`, ignoring ids, sequence numbers, timings and audio
bytes (tests/support/golden.py says exactly what is ignored and why).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from stack import LocalStack

from tests.support import golden
from tests.support.realtime import Event, RealtimeClient, of_type
from tests.support.speech import silence, spoken

MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
LISTENING_VAD = {
    "type": "realtime",
    "overlap_policy": "listen_only",
    "audio": {"input": {"turn_detection": {"type": "server_vad", "interrupt_response": False}}},
}
QUESTION = silence(300) + spoken("What is the weather like today?") + silence(900)


def url(stack: LocalStack) -> str:
    return f"ws://127.0.0.1:{stack.ports.gateway}/v1/realtime"


@pytest.fixture
async def fast(synthetic_stack: LocalStack) -> AsyncIterator[RealtimeClient]:
    client = await RealtimeClient.connect(url(synthetic_stack))
    yield client
    await client.close()


@pytest.fixture
async def slow(slow_synthetic_stack: LocalStack) -> AsyncIterator[RealtimeClient]:
    client = await RealtimeClient.connect(url(slow_synthetic_stack))
    yield client
    await client.close()


async def ask(client: RealtimeClient, **response: object) -> list[Event]:
    await client.append(QUESTION)
    await client.send("input_audio_buffer.commit")
    await client.send("response.create", **({"response": response} if response else {}))
    return await client.response_cycle()


async def test_plain_turn(fast: RealtimeClient) -> None:
    await fast.open(**MANUAL)
    await ask(fast)
    golden.check("plain_turn", fast.events)


async def test_text_only_response(fast: RealtimeClient) -> None:
    await fast.open(**MANUAL)
    await ask(fast, output_modalities=["text"])
    golden.check("text_only_response", fast.events)


async def test_barge_in(slow: RealtimeClient) -> None:
    await slow.open(**MANUAL)
    await slow.append(QUESTION)
    await slow.send("input_audio_buffer.commit")
    await slow.send("response.create")
    await slow.until(lambda e: e["type"] == "response.output_audio.delta")
    await slow.send("barge_in")
    await slow.response_cycle()
    golden.check("barge_in", slow.events)


async def test_deferred_overlap(slow: RealtimeClient) -> None:
    await slow.open(**LISTENING_VAD)
    await slow.append(QUESTION)
    await slow.until(lambda e: e["type"] == "response.output_audio.delta")
    # A real question over the answer: heard, kept, and answered after it.
    await slow.append(spoken("And what about tomorrow in the mountains?") + silence(900))
    await slow.response_cycle()
    await slow.response_cycle()
    golden.check("deferred_overlap", slow.events)


async def test_listen_only_short_overlap(slow: RealtimeClient) -> None:
    await slow.open(**LISTENING_VAD)
    await slow.append(QUESTION)
    await slow.until(lambda e: e["type"] == "response.output_audio.delta")
    await slow.append(spoken("Okay.") + silence(900))  # a listener's acknowledgement
    await slow.response_cycle()
    golden.check("listen_only_short_overlap", slow.events)


async def test_truncation(fast: RealtimeClient) -> None:
    await fast.open(**MANUAL)
    events = await ask(fast)
    item_id = of_type(events, "response.output_item.done")[0]["item"]["id"]
    await fast.send(
        "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=1500
    )
    await fast.until(lambda e: e["type"] in ("conversation.item.truncated", "error"))
    golden.check("truncation", fast.events)


async def test_item_create_retrieve_delete(fast: RealtimeClient) -> None:
    await fast.open(**MANUAL)
    await fast.send(
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
    )
    added = await fast.until(lambda e: e["type"] in ("conversation.item.done", "error"))
    item_id = added["item"]["id"]
    await fast.send("conversation.item.retrieve", item_id=item_id)
    await fast.until(lambda e: e["type"] in ("conversation.item.retrieved", "error"))
    await fast.send("conversation.item.delete", item_id=item_id)
    await fast.until(lambda e: e["type"] in ("conversation.item.deleted", "error"))
    await fast.send("conversation.item.retrieve", item_id=item_id)
    await fast.until(lambda e: e["type"] == "error")
    golden.check("item_create_retrieve_delete", fast.events)


async def test_resume_mid_response(slow_synthetic_stack: LocalStack) -> None:
    first = await RealtimeClient.connect(url(slow_synthetic_stack))
    created = await first.open(**MANUAL)
    await first.append(QUESTION)
    await first.send("input_audio_buffer.commit")
    await first.send("response.create")
    await first.until(lambda e: e["type"] == "response.output_audio.delta")
    await first.ws.close()  # the network drops; the session lives on
    session = created["session"]
    second = await RealtimeClient.connect(url(slow_synthetic_stack) + "?duplex=1&autostart=0")
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
        golden.check("resume_mid_response", first.events + second.events)
    finally:
        await second.close()
