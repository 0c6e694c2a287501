"""The serving path through real processes: gateway -> session -> stages, Redis.

The stage workers run the `synthetic` backends here (the serving path is
what is tested, not the models); everything else is real: Redis, gRPC on
loopback, WebSockets, the session journal. Clients speak the duplex dialect
(`?duplex=1`), whose extensions show the journal (`server_event_seq`),
heartbeats, stage metrics and `session.close`; OpenAI's dialect has its own
tests (test_openai_dialect.py, test_sdk_models.py).
"""

from __future__ import annotations

import json
import re
import urllib.request

import pytest
import redis.asyncio as aioredis
from stack import LocalStack

from antiphon.session.state import keys
from antiphon.v1 import session_pb2 as spb
from tests.support.realtime import (
    MANUAL,
    Event,
    RealtimeClient,
    audio_bytes,
    duplex_url,
    of_type,
)
from tests.support.speech import silence, spoken

pytestmark = pytest.mark.stack


@pytest.fixture
def client(duplex_client: RealtimeClient) -> RealtimeClient:
    return duplex_client


RESPONSE_ORDER = [
    "response.created",
    "conversation.item.added",
    "conversation.item.created",
    "response.output_item.added",
    "response.content_part.added",
    "response.speak",
]
TERMINAL_ORDER = [
    "response.output_audio.done",
    "response.output_audio_transcript.done",
    "response.content_part.done",
    "response.output_item.done",
    "conversation.item.done",
    "response.done",
    "rate_limits.updated",
]


def response_events(events: list[Event], response_id: str) -> list[Event]:
    """The events of one response, from `response.created` to `rate_limits.updated`."""
    start = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "response.created" and e["response_id"] == response_id
    )
    out = []
    for e in events[start:]:
        if e["type"].startswith("response.") or e["type"] in (
            "conversation.item.added",
            "conversation.item.created",
            "conversation.item.done",
            "rate_limits.updated",
        ):
            if e["type"].startswith("conversation.item") and not e["item"]["id"].endswith(
                response_id
            ):
                continue
            out.append(e)
        if e["type"] == "rate_limits.updated":
            break
    return out


def assert_normative_lifecycle(events: list[Event]) -> None:
    """The normative table: order, pairing and cardinality of one audio response."""
    types = [e["type"] for e in events]
    assert types[: len(RESPONSE_ORDER)] == RESPONSE_ORDER
    assert types[-len(TERMINAL_ORDER) :] == TERMINAL_ORDER
    body = types[len(RESPONSE_ORDER) : -len(TERMINAL_ORDER)]
    assert body, "no audio"
    # Every audio delta is followed by exactly one transcript delta.
    assert body == ["response.output_audio.delta", "response.output_audio_transcript.delta"] * (
        len(body) // 2
    )
    assert types.count("response.speak") == 1
    joined = "".join(e["delta"] for e in of_type(events, "response.output_audio_transcript.delta"))
    done = of_type(events, "response.output_audio_transcript.done")[0]["transcript"]
    assert joined == done and done


@pytest.mark.models
async def test_commit_then_response_create_gives_exactly_one_ordered_response(
    client: RealtimeClient,
) -> None:
    await client.open(**MANUAL)
    await client.append(spoken("What is the capital of France?"))
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    events = await client.response_cycle()
    created = of_type(events, "response.created")
    assert len(created) == 1
    assert of_type(events, "input_audio_buffer.committed")
    assert_normative_lifecycle(response_events(events, created[0]["response_id"]))
    done = of_type(events, "response.done")[0]
    assert done["response"]["status"] == "completed"
    # No second response: a commit with turn_detection null never answers by itself.
    await client.send("session.heartbeat")
    ack = await client.until(lambda e: e["type"] in ("session.heartbeat_ack", "response.created"))
    assert ack["type"] == "session.heartbeat_ack"


@pytest.mark.models
async def test_server_event_seq_strictly_increases_and_every_event_is_journaled(
    synthetic_stack: LocalStack, client: RealtimeClient
) -> None:
    created = await client.open(**MANUAL)
    await client.append(spoken("Hello there."))
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    await client.response_cycle()
    seqs = [e["server_event_seq"] for e in client.events]
    assert seqs == list(range(1, len(seqs) + 1))
    session_id = created["session"]["id"]
    r = aioredis.Redis.from_url(synthetic_stack.redis_url)
    try:
        entries: list[tuple[bytes, dict[bytes, bytes]]] = await r.xrange(  # type: ignore[assignment]
            keys.journal(session_id)
        )
    finally:
        await r.aclose()
    journaled = {}
    for entry_id, fields in entries:
        ev = spb.ServerEvent.FromString(fields[b"e"])
        assert int(entry_id.split(b"-")[0]) == ev.seq
        journaled[ev.seq] = ev.event_id
    for e in client.events:
        assert journaled[e["server_event_seq"]] == e["event_id"]


async def test_empty_commit_is_one_typed_error_and_no_response(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await client.send("input_audio_buffer.commit", event_id="evt_empty")
    err = await client.until(lambda e: e["type"] == "error")
    assert err["error"]["code"] == "input_audio_buffer_empty"
    assert err["error"]["type"] == "invalid_request_error"
    assert err["error"]["event_id"] == "evt_empty"
    assert err["server_event_seq"] > 0
    await client.send("session.heartbeat")
    await client.until(lambda e: e["type"] == "session.heartbeat_ack")
    assert not of_type(client.events, "response.created")


async def test_invalid_events_get_the_error_envelope_and_change_nothing(
    client: RealtimeClient,
) -> None:
    await client.open(**MANUAL)
    await client.send("no.such.event", event_id="evt_bad")
    err = await client.until(lambda e: e["type"] == "error")
    assert err["error"] == {
        "type": "invalid_request_error",
        "code": "invalid_event",
        "message": "unknown event type 'no.such.event'",
        "param": "type",
        "event_id": "evt_bad",
    }
    await client.ws.send("{not json")
    err = await client.until(lambda e: e["type"] == "error")
    assert err["error"]["code"] == "invalid_json"
    await client.send("input_audio_buffer.append", audio="***", event_id="evt_b64")
    err = await client.until(lambda e: e["type"] == "error")
    assert (err["error"]["code"], err["error"]["param"]) == ("invalid_audio", "audio")
    await client.send("session.update", session={"temperature": 9.0}, event_id="evt_temp")
    err = await client.until(lambda e: e["type"] == "error")
    assert err["error"]["param"] == "temperature"
    # The rejected update changed nothing: the next valid update echoes the old value.
    await client.send("session.update", session={"instructions": "Be brief."})
    updated = await client.until(lambda e: e["type"] == "session.updated")
    assert updated["session"]["temperature"] == 0.0
    assert updated["session"]["instructions"] == "Be brief."


async def test_an_input_rate_change_applies_to_the_very_next_append(
    client: RealtimeClient,
) -> None:
    """The session resamples in mailbox order: no append is read at a stale rate."""
    await client.open(**MANUAL)
    await client.send(
        "session.update",
        session={"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
    )
    await client.append(silence(1000, 16000), chunk_bytes=6400)
    await client.send("input_audio_buffer.commit")
    done = await client.until(
        lambda e: e["type"] == "conversation.item.input_audio_transcription.completed"
    )
    # The synthetic ASR reports how much 16 kHz audio it was given.
    heard = re.search(r"(\d+) milliseconds", done["transcript"])
    assert heard is not None and int(heard.group(1)) == 1000


@pytest.mark.models
async def test_text_only_response_streams_text_and_no_audio(client: RealtimeClient) -> None:
    await client.open(**MANUAL)
    await client.append(spoken("Say something."))
    await client.send("input_audio_buffer.commit")
    await client.send("response.create", response={"output_modalities": ["text"]})
    events = await client.response_cycle()
    assert not of_type(events, "response.output_audio.delta", "response.speak")
    deltas = of_type(events, "response.output_text.delta")
    done = of_type(events, "response.output_text.done")[0]
    assert deltas and "".join(d["delta"] for d in deltas) == done["text"]


@pytest.mark.models
async def test_second_turn_prompt_holds_the_first_turn(client: RealtimeClient) -> None:
    created = await client.open(**MANUAL, extra_body={"return_stage_metrics": True})
    assert created["session"]["extra_body"]["return_stage_metrics"] is True
    await client.append(spoken("First question."))
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    first = await client.response_cycle()
    user1 = of_type(first, "conversation.item.input_audio_transcription.completed")[0]
    answer1 = of_type(first, "response.output_audio_transcript.done")[0]["transcript"]
    await client.append(spoken("Second question."))
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    second = await client.response_cycle()
    prompt = of_type(second, "response.done")[0]["response"]["metadata"]["stage_metrics"]["prompt"]
    assert user1["transcript"] in prompt
    assert answer1 in prompt


@pytest.mark.models
async def test_response_cancel_ends_the_response_cancelled_with_no_later_audio(
    client: RealtimeClient,
) -> None:
    await client.open(**MANUAL)
    await client.append(spoken("Tell me a story."))
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    created = await client.until(lambda e: e["type"] == "response.created")
    await client.send("response.cancel")
    events = await client.response_cycle()
    done = of_type(events, "response.done")[0]
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "client_cancelled"
    # Nothing of the cancelled response arrives after its terminal event.
    await client.send("session.heartbeat")
    await client.until(lambda e: e["type"] == "session.heartbeat_ack")
    after = client.events[client.events.index(done) :]
    assert not [e for e in after if e.get("response_id") == created["response_id"] and "delta" in e]


@pytest.mark.models
async def test_server_vad_lane_detects_the_turn_and_answers_without_a_commit(
    client: RealtimeClient,
) -> None:
    created = await client.open(type="realtime")
    assert created["session"]["turn_detection"]["type"] == "server_vad"
    await client.append(silence(400) + spoken("What time is it?") + silence(1200))
    events = await client.response_cycle()
    types = [e["type"] for e in events]
    assert types.index("input_audio_buffer.speech_started") < types.index(
        "input_audio_buffer.speech_stopped"
    )
    assert types.index("input_audio_buffer.speech_stopped") < types.index(
        "input_audio_buffer.committed"
    )
    assert of_type(events, "response.done")[0]["response"]["status"] == "completed"
    assert audio_bytes(events)


@pytest.mark.models
async def test_native_lane_listens_then_speaks_after_silence_with_no_commit(
    synthetic_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(
        duplex_url(synthetic_stack.ports.gateway, "?native_duplex=1")
    )
    try:
        created = await client.open(type="realtime", turn_detection=None)
        assert created["session"]["extra_body"]["native_duplex"] is True
        speech = spoken("Could you please tell me what the weather will be like tomorrow?")
        await client.append(silence(300) + speech + silence(1500))
        events = await client.response_cycle()
        types = [e["type"] for e in events]
        assert "response.listen" in types
        assert types.index("response.listen") < types.index("response.created")
        assert "input_audio_buffer.commit" not in types
        assert of_type(events, "response.done")[0]["response"]["status"] == "completed"
    finally:
        await client.close()


async def test_admission_refuses_past_max_sessions_and_frees_on_close(
    synthetic_stack: LocalStack,
) -> None:
    clients = [
        await RealtimeClient.connect(duplex_url(synthetic_stack.ports.gateway)) for _ in range(4)
    ]
    try:
        opened = [await c.open(**MANUAL) for c in clients[:3]]
        assert all(o["type"] == "session.created" for o in opened)
        refused = await clients[3].open(**MANUAL)
        assert refused["type"] == "error"
        assert refused["error"]["code"] == "duplex_session_busy"
        assert refused["error"]["type"] == "rate_limit_error"
        await clients[0].send("session.close")
        closed = await clients[0].until(lambda e: e["type"] == "session.closed")
        assert closed["reason"] == "session_close"
        late = await RealtimeClient.connect(duplex_url(synthetic_stack.ports.gateway))
        clients.append(late)
        assert (await late.open(**MANUAL))["type"] == "session.created"
    finally:
        for c in clients:
            await c.close()


async def test_session_close_is_the_last_event_and_closes_the_socket(
    client: RealtimeClient,
) -> None:
    await client.open(**MANUAL)
    await client.send("session.close")
    closed = await client.until(lambda e: e["type"] == "session.closed")
    assert closed["reason"] == "session_close"
    with pytest.raises(Exception):  # noqa: B017 - any close/timeout means no further event
        await client.recv(timeout=3)


def test_health_readiness_and_metrics_endpoints(synthetic_stack: LocalStack) -> None:
    base = synthetic_stack.gateway_url
    with urllib.request.urlopen(f"{base}/healthz") as r:
        assert json.load(r) == {"status": "ok"}
    with urllib.request.urlopen(f"{base}/readyz") as r:
        assert r.status == 200
    with urllib.request.urlopen(f"{base}/metrics") as r:
        text = r.read().decode()
    assert "antiphon_gateway_connections_active" in text
    port = synthetic_stack.ports.session_metrics
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as r:
        assert "antiphon_session_events_total" in r.read().decode()
