"""The session behaviours behind the duplex contract (`test_duplex_contract.py`):
truncation by word marks, response-scoped options, conversation items, input
cancel, output clear, client barge-in, playback acks and capability gating.
Real WebSockets, gateway, session, Redis and gRPC; the `synthetic` stage
backends with the real Silero VAD; every client speaks the duplex dialect
(`/v1/realtime?duplex=1`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from stack import LocalStack, Ports

from tests.support.history import stored_items
from tests.support.realtime import MANUAL, Event, RealtimeClient, ask, duplex_url, of_type
from tests.support.speech import weather_question
from tests.support.stacks import started

pytestmark = pytest.mark.stack

AUDIO = "response.output_audio.delta"


@pytest.fixture
def client(duplex_client: RealtimeClient) -> RealtimeClient:
    return duplex_client


@pytest.fixture
def slow_client(slow_duplex_client: RealtimeClient) -> RealtimeClient:
    return slow_duplex_client


async def until_the_next_reply_speaks(client: RealtimeClient) -> list[Event]:
    """Ask again; everything from now until the new reply's first audio. Each stage
    answers a session on one ordered stream, so anything of an earlier reply still
    on its way through the stages comes before that audio."""
    start = len(client.events)
    await client.append(weather_question())
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    await client.until(lambda e: e["type"] == AUDIO)
    return client.events[start:]


async def a_reply_speaking(client: RealtimeClient) -> Event:
    """A manual session asks the weather question; its reply's first audio delta."""
    await client.open(**MANUAL)
    await client.append(weather_question())
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    return await client.until(lambda e: e["type"] == AUDIO)


# ------------------------------------------------------------ the behaviours
@pytest.mark.models
async def test_truncation_cuts_at_word_marks_and_the_next_prompt_holds_exactly_that(
    client: RealtimeClient, synthetic_stack: LocalStack
) -> None:
    await client.open(**MANUAL, extra_body={"return_stage_metrics": True})
    events = await ask(client, weather_question())
    item = of_type(events, "response.output_item.done")[0]["item"]
    said = of_type(events, "response.output_audio_transcript.done")[0]["transcript"]
    # The synthetic voice ends each word at 60 ms per character of its clause.
    await client.send(
        "conversation.item.truncate", item_id=item["id"], content_index=0, audio_end_ms=1500
    )
    cut = await client.until(lambda e: e["type"] in ("conversation.item.truncated", "error"))
    assert cut["type"] == "conversation.item.truncated", cut
    assert said.startswith("You said: synthetic utterance")
    assert cut["event"]["transcript"] == "You said: synthetic"
    stored = await stored_items(synthetic_stack.redis_url, fast_id(client))
    assert [i.content[0].transcript for i in stored if i.role == "assistant"] == [
        "You said: synthetic"
    ]
    nxt = await ask(client, weather_question())
    prompt = of_type(nxt, "response.done")[0]["response"]["metadata"]["stage_metrics"]["prompt"]
    assert "<assistant>You said: synthetic\n" in prompt
    assert "milliseconds. Thank you" not in prompt.split("<assistant>You said: synthetic")[1][:40]


def fast_id(client: RealtimeClient) -> str:
    return str(of_type(client.events, "session.created")[0]["session"]["id"])


@pytest.mark.models
async def test_response_options_are_scoped_to_their_response(client: RealtimeClient) -> None:
    await client.open(**MANUAL, extra_body={"return_stage_metrics": True})
    one = await ask(
        client,
        weather_question(),
        output_modalities=["text"],
        instructions="Answer like a pirate.",
        metadata={"trace": "turn-1"},
        max_output_tokens=3,
    )
    done_one = of_type(one, "response.done")[0]["response"]
    assert done_one["output_modalities"] == ["text"]
    assert done_one["metadata"]["trace"] == "turn-1"
    assert "Answer like a pirate." in done_one["metadata"]["stage_metrics"]["prompt"]
    assert len(of_type(one, "response.output_text.delta")) <= 3
    two = await ask(client, weather_question())
    done_two = of_type(two, "response.done")[0]["response"]
    assert done_two["output_modalities"] == ["audio"]
    assert "trace" not in done_two["metadata"]
    assert "pirate" not in done_two["metadata"]["stage_metrics"]["prompt"]
    assert of_type(two, AUDIO)


async def test_created_items_keep_history_order_and_reach_the_prompt(
    client: RealtimeClient,
) -> None:
    await client.open(**MANUAL, extra_body={"return_stage_metrics": True})

    async def create(text: str, **extra: Any) -> Event:
        await client.send(
            "conversation.item.create",
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            },
            **extra,
        )
        return await client.until(lambda e: e["type"] in ("conversation.item.done", "error"))

    a = await create("alpha")
    c = await create("gamma")
    b = await create("beta", previous_item_id=a["item"]["id"])
    assert b["previous_item_id"] == a["item"]["id"]
    await client.send("conversation.item.delete", item_id=c["item"]["id"])
    await client.until(lambda e: e["type"] == "conversation.item.deleted")
    await client.send("response.create")
    events = await client.response_cycle()
    prompt = of_type(events, "response.done")[0]["response"]["metadata"]["stage_metrics"]["prompt"]
    assert prompt.index("<user>alpha") < prompt.index("<user>beta")
    assert "gamma" not in prompt
    await client.send("conversation.item.retrieve", item_id="item_missing")
    error = await client.until(lambda e: e["type"] == "error")
    assert (error["error"]["code"], error["error"]["param"]) == ("item_not_found", "item_id")


async def test_a_function_call_output_item_is_stored_and_prompted(client: RealtimeClient) -> None:
    await client.open(**MANUAL, extra_body={"return_stage_metrics": True})
    await client.send(
        "conversation.item.create",
        item={"type": "function_call_output", "call_id": "call_7d1f", "output": '{"temp_c": 24}'},
    )
    done = await client.until(lambda e: e["type"] in ("conversation.item.done", "error"))
    assert done["item"]["type"] == "function_call_output"
    await client.send("response.create")
    events = await client.response_cycle()
    prompt = of_type(events, "response.done")[0]["response"]["metadata"]["stage_metrics"]["prompt"]
    assert '{"temp_c": 24}' in prompt


@pytest.mark.models
async def test_input_cancel_advances_the_epoch_and_no_old_audio_follows(
    slow_client: RealtimeClient,
) -> None:
    first = await a_reply_speaking(slow_client)
    await slow_client.send("input.cancel")
    done = await slow_client.until(lambda e: e["type"] == "response.done")
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "input_cancelled"
    await slow_client.until(lambda e: e["type"] == "input_audio_buffer.cleared")
    later = await until_the_next_reply_speaks(slow_client)
    assert not [e for e in later if e.get("response_id") == first["response_id"]]


@pytest.mark.models
async def test_output_audio_buffer_clear_stops_the_reply(slow_client: RealtimeClient) -> None:
    first = await a_reply_speaking(slow_client)
    await slow_client.send("output_audio_buffer.clear")
    cleared = await slow_client.until(lambda e: e["type"] == "output_audio_buffer.cleared")
    assert cleared["response_id"] == first["response_id"]
    done = of_type(slow_client.events, "response.done")[0]["response"]
    assert (done["status"], done["status_details"]["reason"]) == (
        "cancelled",
        "output_audio_cleared",
    )
    later = await until_the_next_reply_speaks(slow_client)
    assert not [e for e in of_type(later, AUDIO) if e["response_id"] == first["response_id"]]


@pytest.mark.models
async def test_client_barge_in_cancels_with_an_overlap_decision(
    slow_client: RealtimeClient,
) -> None:
    await a_reply_speaking(slow_client)
    await slow_client.send("turn.signal", event="barge_in", payload={"source": "client_vad"})
    events = await slow_client.response_cycle()
    decision = of_type(events, "overlap.decision")[0]
    assert (decision["policy"], decision["action"]) == ("listen_only", "barge_in")
    done = of_type(events, "response.done")[0]["response"]
    assert (done["status"], done["status_details"]["reason"]) == ("cancelled", "barge_in")


@pytest.mark.models
async def test_ack_only_history_holds_only_what_was_acknowledged(
    client: RealtimeClient, synthetic_stack: LocalStack
) -> None:
    await client.open(**MANUAL, playback_commit_policy="ack_only")
    events = await ask(client, weather_question())
    done = of_type(events, "response.done")[0]["response"]

    async def assistant_texts() -> list[str]:
        items = await stored_items(synthetic_stack.redis_url, fast_id(client))
        return [i.content[0].transcript for i in items if i.role == "assistant"]

    assert await assistant_texts() == []  # nothing acknowledged yet
    await client.send("playback.ack", response_id=done["id"], played_ms=1200, committed_ms=1200)
    acked = await client.until(lambda e: e["type"] in ("playback.acknowledged", "error"))
    assert acked["type"] == "playback.acknowledged", acked
    body = acked.get("event", acked)
    assert body["history_committed"] is True
    assert body["playback"]["played_ms"] == 1200
    assert await assistant_texts() == ["You said: synthetic"]
    await client.send("audio.playback_ack", response_id=done["id"], played_ms=1800)
    await client.until(lambda e: e["type"] == "playback.acknowledged")
    assert await assistant_texts() == ["You said: synthetic utterance"]


# ------------------------------------------------------------ capability gating
@pytest.fixture(scope="module")
def no_barge_in_stack(request: pytest.FixtureRequest) -> Iterator[LocalStack]:
    """A stage0 backend that declares no barge-in support."""
    stack = LocalStack(
        ports=Ports.free(),
        extra_env={
            "ANTIPHON_BACKEND": "synthetic",
            "ANTIPHON_CAPACITY": "16",
            "ANTIPHON_SUPPORTS_BARGE_IN": "false",
        },
    )
    with started(request, stack):
        yield stack


async def test_capability_gated_surfaces_are_refused_with_a_typed_error(
    no_barge_in_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(duplex_url(no_barge_in_stack.ports.gateway))
    try:
        created = await client.open(**MANUAL)
        caps = created["session"]["capabilities"]
        assert caps["supports_barge_in"] is False and caps["supports_audio_truncate"] is True
        gated: list[tuple[str, dict[str, Any]]] = [
            ("barge_in", {}),
            ("turn.signal", {"event": "barge_in"}),
            ("session.update", {"session": {"overlap_policy": "barge_in_on_speech"}}),
        ]
        for event, fields in gated:
            await client.send(event, event_id=f"evt_{event}", **fields)
            error = await client.until(lambda e: e["type"] == "error")
            assert error["error"]["code"] == "unsupported_capability", error
            assert error["error"]["event_id"] == f"evt_{event}"
        await asyncio.sleep(0)
    finally:
        await client.close()
