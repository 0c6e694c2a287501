"""The duplex contract, one test per rule (reference: "Normative Realtime event
contract" and the commit-to-response table of fullduplex-runtime-design.md).
Real WebSockets, gateway, session, Redis and gRPC; the `synthetic` stage
backends with the real Silero VAD. The contract is the duplex dialect's
(`/v1/realtime?duplex=1`): every client here speaks it. The session
behaviours behind the rules are `test_duplex_behaviours.py`'s.
"""

from __future__ import annotations

import pytest
from stack import LocalStack

from tests.support.realtime import MANUAL, Event, RealtimeClient, ask, duplex_url, of_type
from tests.support.speech import silence, spoken, weather_question

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
