"""One golden wire transcript per scenario (reference: "the golden transcript test").

Each test drives a scenario end to end over a real WebSocket on the
synthetic stack and compares the whole event sequence with
`golden/<scenario>.json`, ignoring ids, sequence numbers, timings and audio
bytes (tests/support/golden.py says exactly what is ignored and why).
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from stack import LocalStack

from tests.support import golden
from tests.support.realtime import MANUAL, RealtimeClient, ask, of_type, realtime_url
from tests.support.speech import silence, spoken

LISTENING_VAD = {
    "type": "realtime",
    "overlap_policy": "listen_only",
    "audio": {"input": {"turn_detection": {"type": "server_vad", "interrupt_response": False}}},
}
QUESTION = silence(300) + spoken("What is the weather like today?") + silence(900)


async def test_plain_turn(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await ask(client, QUESTION)
    golden.check("plain_turn", client.events)


async def test_text_only_response(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await ask(client, QUESTION, output_modalities=["text"])
    golden.check("text_only_response", client.events)


async def test_barge_in(slow_client: RealtimeClient) -> None:
    await slow_client.open(**MANUAL)
    await slow_client.append(QUESTION)
    await slow_client.send("input_audio_buffer.commit")
    await slow_client.send("response.create")
    await slow_client.until(lambda e: e["type"] == "response.output_audio.delta")
    await slow_client.send("barge_in")
    await slow_client.response_cycle()
    golden.check("barge_in", slow_client.events)


async def test_deferred_overlap(slow_client: RealtimeClient) -> None:
    await slow_client.open(**LISTENING_VAD)
    await slow_client.append(QUESTION)
    await slow_client.until(lambda e: e["type"] == "response.output_audio.delta")
    # A real question over the answer: heard, kept, and answered after it.
    await slow_client.append(spoken("And what about tomorrow in the mountains?") + silence(900))
    await slow_client.response_cycle()
    await slow_client.response_cycle()
    golden.check("deferred_overlap", slow_client.events)


async def test_listen_only_short_overlap(slow_client: RealtimeClient) -> None:
    await slow_client.open(**LISTENING_VAD)
    await slow_client.append(QUESTION)
    await slow_client.until(lambda e: e["type"] == "response.output_audio.delta")
    await slow_client.append(spoken("Okay.") + silence(900))  # a listener's acknowledgement
    await slow_client.response_cycle()
    golden.check("listen_only_short_overlap", slow_client.events)


async def test_truncation(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    events = await ask(client, QUESTION)
    item_id = of_type(events, "response.output_item.done")[0]["item"]["id"]
    await client.send(
        "conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=1500
    )
    await client.until(lambda e: e["type"] in ("conversation.item.truncated", "error"))
    golden.check("truncation", client.events)


async def test_item_create_retrieve_delete(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await client.send(
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
    )
    added = await client.until(lambda e: e["type"] in ("conversation.item.done", "error"))
    item_id = added["item"]["id"]
    await client.send("conversation.item.retrieve", item_id=item_id)
    await client.until(lambda e: e["type"] in ("conversation.item.retrieved", "error"))
    await client.send("conversation.item.delete", item_id=item_id)
    await client.until(lambda e: e["type"] in ("conversation.item.deleted", "error"))
    await client.send("conversation.item.retrieve", item_id=item_id)
    await client.until(lambda e: e["type"] == "error")
    golden.check("item_create_retrieve_delete", client.events)


async def _detached(stack: LocalStack, session_id: str) -> None:
    """Until the session let its stage0 slot go (it heard of the drop)."""
    r = aioredis.Redis.from_url(stack.redis_url)
    try:
        for _ in range(200):
            bound = await r.hget(f"ap:{{{session_id}}}:session", "stage0")  # type: ignore[misc]
            if bound == b"":
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the session never detached")
    finally:
        await r.aclose()


async def test_resume_mid_response(slow_synthetic_stack: LocalStack) -> None:
    first = await RealtimeClient.connect(realtime_url(slow_synthetic_stack.ports.gateway))
    created = await first.open(**MANUAL)
    await first.append(QUESTION)
    await first.send("input_audio_buffer.commit")
    await first.send("response.create")
    await first.until(lambda e: e["type"] == "response.output_audio.delta")
    # The network drops (no close frame): the session lives on, resumable,
    # and the reply it could not finish without its stage slots ends.
    first.ws.transport.abort()
    session = created["session"]
    await _detached(slow_synthetic_stack, session["id"])
    second = await RealtimeClient.connect(
        realtime_url(slow_synthetic_stack.ports.gateway) + "?duplex=1&autostart=0"
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
        golden.check("resume_mid_response", first.events + second.events)
    finally:
        await second.close()
