"""The duplex contract, one test per rule (reference: "Normative Realtime event
contract" and the commit-to-response table of fullduplex-runtime-design.md),
plus the session behaviours behind them: truncation by word marks, response
scoped options, conversation items, input cancel, output clear, playback acks
and capability gating. Real WebSockets, gateway, session, Redis and gRPC; the
`synthetic` stage backends with the real Silero VAD. The contract is the
duplex dialect's (`/v1/realtime?duplex=1`): every client here speaks it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from stack import LocalStack, Ports

from tests.support.history import stored_items
from tests.support.realtime import MANUAL, Event, RealtimeClient, ask, duplex_url, of_type
from tests.support.speech import silence, spoken, weather_question
from tests.support.stacks import started

pytestmark = pytest.mark.stack

AUTO_LISTEN = {
    "type": "realtime",
    "overlap_policy": "listen_only",
    "audio": {"input": {"turn_detection": {"type": "server_vad", "interrupt_response": False}}},
}
AUDIO = "response.output_audio.delta"
TRANSCRIPT = "response.output_audio_transcript.delta"


@pytest.fixture
def client(duplex_client: RealtimeClient) -> RealtimeClient:
    """The reference's contract is the duplex dialect's."""
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


# ------------------------------------------------ the normative lifecycle table
@pytest.fixture(scope="module")
async def turns(synthetic_stack: LocalStack) -> dict[str, list[Event]]:
    """One audio turn, one text-only turn and one cancelled turn, recorded once."""
    client = await RealtimeClient.connect(duplex_url(synthetic_stack.ports.gateway))
    try:
        await client.open(**MANUAL)
        recorded = {
            "audio": await ask(client, weather_question()),
            "text": await ask(client, weather_question(), output_modalities=["text"]),
        }
        await client.append(weather_question())
        await client.send("input_audio_buffer.commit")
        await client.send("response.create")
        await client.until(lambda e: e["type"] == "response.created")
        await client.send("response.cancel")
        recorded["cancelled"] = await client.response_cycle()
        recorded["all"] = list(client.events)
    finally:
        await client.close()
    return recorded


def types(events: list[Event]) -> list[str]:
    return [e["type"] for e in events]


@pytest.mark.models
def test_rule_response_created_once_and_before_its_output(turns: dict[str, list[Event]]) -> None:
    for events in (turns["audio"], turns["text"]):
        t = types(events)
        assert t.count("response.created") == 1
        first_output = min(
            t.index(x)
            for x in ("response.output_item.added", "response.content_part.added")
            if x in t
        )
        assert t.index("response.created") < first_output


@pytest.mark.models
def test_rule_speak_at_most_once_after_created_and_before_audio(
    turns: dict[str, list[Event]],
) -> None:
    t = types(turns["audio"])
    assert t.count("response.speak") == 1
    assert t.index("response.created") < t.index("response.speak") < t.index(AUDIO)
    assert "response.speak" not in types(turns["text"])


@pytest.mark.models
def test_rule_every_audio_delta_is_paired_with_a_transcript_delta(
    turns: dict[str, list[Event]],
) -> None:
    t = types(turns["audio"])
    deltas = [i for i, x in enumerate(t) if x == AUDIO]
    assert deltas
    assert all(t[i + 1] == TRANSCRIPT for i in deltas)
    assert t.count(TRANSCRIPT) == len(deltas)


@pytest.mark.models
def test_rule_audio_done_closes_audio_before_terminals_and_is_omitted_without_audio(
    turns: dict[str, list[Event]],
) -> None:
    t = types(turns["audio"])
    last_delta = max(i for i, x in enumerate(t) if x == AUDIO)
    assert t.count("response.output_audio.done") == 1
    assert last_delta < t.index("response.output_audio.done") < t.index("response.done")
    assert "response.output_audio.done" not in types(turns["text"])


@pytest.mark.models
def test_rule_transcript_done_is_the_exact_concatenation(turns: dict[str, list[Event]]) -> None:
    events = turns["audio"]
    joined = "".join(e["delta"] for e in of_type(events, TRANSCRIPT))
    (done,) = of_type(events, "response.output_audio_transcript.done")
    assert joined and done["transcript"] == joined
    text = turns["text"]
    (text_done,) = of_type(text, "response.output_text.done")
    assert text_done["text"] == "".join(
        e["delta"] for e in of_type(text, "response.output_text.delta")
    )


@pytest.mark.models
def test_rule_item_terminals_after_parts_and_before_response_done(
    turns: dict[str, list[Event]],
) -> None:
    for events in (turns["audio"], turns["text"], turns["cancelled"]):
        t = types(events)
        assert t.count("response.output_item.done") == 1
        assert t.count("conversation.item.done") <= 2  # the user item may finish here too
        assert t.index("response.content_part.done") < t.index("response.output_item.done")
        assert t.index("response.output_item.done") < t.index("response.done")


@pytest.mark.models
def test_rule_response_done_exactly_once_and_rate_limits_right_after(
    turns: dict[str, list[Event]],
) -> None:
    t = types(turns["all"])
    created = [e["response"]["id"] for e in of_type(turns["all"], "response.created")]
    done = [e["response"]["id"] for e in of_type(turns["all"], "response.done")]
    assert sorted(created) == sorted(done) and len(set(done)) == len(done) == 3
    for i, x in enumerate(t):
        if x == "response.done":
            assert t[i + 1] == "rate_limits.updated"
    assert t.count("rate_limits.updated") == t.count("response.done")


@pytest.mark.models
def test_rule_cancelled_terminal_status_and_no_reused_ids(turns: dict[str, list[Event]]) -> None:
    (done,) = of_type(turns["cancelled"], "response.done")
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "client_cancelled"
    ids = [e["response"]["id"] for e in of_type(turns["all"], "response.created")]
    assert len(set(ids)) == len(ids)


@pytest.mark.models
def test_rule_session_created_comes_first(turns: dict[str, list[Event]]) -> None:
    assert turns["all"][0]["type"] == "session.created"


async def test_rule_listen_may_come_without_a_response(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await client.append(silence(500))
    await client.send("input_audio_buffer.commit", is_speech=False)
    await client.until(lambda e: e["type"] == "response.listen")
    await client.barrier()
    assert not of_type(client.events, "response.created")


# --------------------------------------------------- the commit-to-response table
@pytest.mark.models
async def test_commit_without_auto_response_waits_for_response_create(
    client: RealtimeClient,
) -> None:
    await client.open(**MANUAL)
    await client.append(weather_question())
    await client.send("input_audio_buffer.commit")
    await client.until(lambda e: e["type"] == "input_audio_buffer.committed")
    # Neither the commit nor the transcript that follows it starts a response.
    await client.until(
        lambda e: e["type"] == "conversation.item.input_audio_transcription.completed"
    )
    await client.barrier()
    assert not of_type(client.events, "response.created")


@pytest.mark.models
async def test_commit_with_auto_response_answers_after_committed(client: RealtimeClient) -> None:
    await client.open(type="realtime")  # server VAD: it commits and answers
    await client.append(weather_question())
    events = await client.response_cycle()
    t = types(events)
    assert t.index("input_audio_buffer.committed") < t.index("response.created")
    assert of_type(events, "response.done")[0]["response"]["status"] == "completed"


@pytest.mark.models
async def test_short_overlap_is_acknowledged_and_creates_no_response(
    slow_client: RealtimeClient,
) -> None:
    await slow_client.open(**AUTO_LISTEN)
    await slow_client.append(weather_question())
    first = await slow_client.until(lambda e: e["type"] == AUDIO)
    await slow_client.append(spoken("Okay.") + silence(900))
    await slow_client.response_cycle()
    (drop,) = [e for e in of_type(slow_client.events, "overlap.decision") if e["action"] == "drop"]
    assert drop["reason"] == "short_overlap"
    assert not of_type(await slow_client.barrier(), "response.created")
    assert {e["response"]["id"] for e in of_type(slow_client.events, "response.created")} == {
        first["response_id"]
    }


@pytest.mark.models
async def test_meaningful_overlap_is_deferred_then_answered_with_a_new_id(
    slow_client: RealtimeClient,
) -> None:
    await slow_client.open(**AUTO_LISTEN)
    await slow_client.append(weather_question())
    first = await slow_client.until(lambda e: e["type"] == AUDIO)
    await slow_client.append(spoken("And what about tomorrow in the mountains?") + silence(900))
    deferred = await slow_client.until(lambda e: e["type"] == "input_audio_buffer.committed")
    assert deferred["event"]["response_create_deferred"] is True
    one = await slow_client.response_cycle()
    assert of_type(one, "response.done")[0]["response"]["id"] == first["response_id"]
    assert of_type(one, "response.done")[0]["response"]["status"] == "completed"
    two = await slow_client.response_cycle()
    (created,) = of_type(two, "response.created")
    assert created["response"]["id"] != first["response_id"]
    assert of_type(two, "response.done")[0]["response"]["status"] == "completed"


async def test_silence_commit_is_acknowledged_then_listen(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await client.append(silence(400))
    await client.send("input_audio_buffer.commit", is_speech=False)
    listen = await client.until(lambda e: e["type"] == "response.listen")
    t = types(client.events)
    assert t.index("input_audio_buffer.committed") < t.index("response.listen")
    assert listen["response"]["metadata"]["reason"] == "silence_commit"
    assert not of_type(client.events, "conversation.item.added")


async def test_empty_commit_is_one_error_and_no_response(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await client.send("input_audio_buffer.commit")
    error = await client.until(lambda e: e["type"] == "error")
    assert error["error"]["code"] == "input_audio_buffer_empty"
    assert not of_type(await client.barrier(), "response.created", "error")


@pytest.mark.models
async def test_after_a_cancel_the_next_turn_gets_a_new_response(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await client.append(weather_question())
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    created = await client.until(lambda e: e["type"] == "response.created")
    await client.send("response.cancel")
    await client.response_cycle()
    events = await ask(client, weather_question())
    (done,) = of_type(events, "response.done")
    assert done["response"]["status"] == "completed"
    assert done["response"]["id"] != created["response"]["id"]


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
    await slow_client.open(**MANUAL)
    await slow_client.append(weather_question())
    await slow_client.send("input_audio_buffer.commit")
    await slow_client.send("response.create")
    first = await slow_client.until(lambda e: e["type"] == AUDIO)
    await slow_client.send("input.cancel")
    done = await slow_client.until(lambda e: e["type"] == "response.done")
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "input_cancelled"
    await slow_client.until(lambda e: e["type"] == "input_audio_buffer.cleared")
    later = await until_the_next_reply_speaks(slow_client)
    assert not [e for e in later if e.get("response_id") == first["response_id"]]


@pytest.mark.models
async def test_output_audio_buffer_clear_stops_the_reply(slow_client: RealtimeClient) -> None:
    await slow_client.open(**MANUAL)
    await slow_client.append(weather_question())
    await slow_client.send("input_audio_buffer.commit")
    await slow_client.send("response.create")
    first = await slow_client.until(lambda e: e["type"] == AUDIO)
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
    await slow_client.open(**MANUAL)
    await slow_client.append(weather_question())
    await slow_client.send("input_audio_buffer.commit")
    await slow_client.send("response.create")
    await slow_client.until(lambda e: e["type"] == AUDIO)
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
