"""How OpenAI's dialect opens: `session.created` on connect, as OpenAI does.

A stock client (Pipecat waits for it before sending anything) gets
`session.created` with the server's defaults as soon as the socket opens;
appends before any `session.update` are heard; the first `session.update`
answers `session.updated`. The session is admitted and bound at connect, so
a refusal is one `error`, then the close. The duplex dialect keeps the
reference's handshake: its first `session.update` opens. Every frame here
is judged by the `openai` SDK's models as it arrives (`RealtimeClient`).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
import websockets
from stack import LocalStack

from tests.support.realtime import (
    MANUAL,
    RealtimeClient,
    of_type,
    realtime_url,
)
from tests.support.speech import weather_question

pytestmark = pytest.mark.stack


async def test_session_created_comes_on_connect_with_the_server_defaults(
    client: RealtimeClient,
) -> None:
    created = await client.recv(timeout=10)
    assert created["type"] == "session.created"
    assert set(created) == {"type", "event_id", "session"}  # no resume token, no seq
    session = created["session"]
    assert session["type"] == "realtime" and session["id"].startswith("sess_")
    assert session["output_modalities"] == ["audio"]
    assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    # Nothing else until the client speaks.
    assert await client.barrier() == []


@pytest.mark.models
async def test_appends_before_any_session_update_are_heard_and_answered(
    client: RealtimeClient,
) -> None:
    """What Pipecat does: `session.created`, then audio at once (server VAD by default)."""
    await client.until(lambda e: e["type"] == "session.created")
    await client.append(weather_question())
    events = await client.response_cycle()
    assert of_type(events, "input_audio_buffer.committed")
    assert of_type(events, "response.done")[0]["response"]["status"] == "completed"
    assert not of_type(client.events, "error")


async def test_the_first_session_update_answers_session_updated(client: RealtimeClient) -> None:
    await client.until(lambda e: e["type"] == "session.created")
    await client.send("session.update", session={**MANUAL, "instructions": "Be brief."})
    updated = await client.until(lambda e: e["type"] != "session.created")
    assert updated["type"] == "session.updated"
    assert updated["session"]["instructions"] == "Be brief."
    assert updated["session"]["audio"]["input"]["turn_detection"] is None
    assert len(of_type(client.events, "session.created")) == 1


async def test_a_refused_admission_is_one_error_then_the_close(
    synthetic_stack: LocalStack,
) -> None:
    """The session is admitted at connect: past `max_sessions` (3) the socket
    gets an `error` and is closed; a clean close frees its slot for the next."""
    url = realtime_url(synthetic_stack.ports.gateway)
    admitted: list[RealtimeClient] = []
    try:
        # Up to three are admitted (fewer while an earlier test's session
        # still ends), then one is refused.
        for _ in range(4):
            refused = await RealtimeClient.connect(url)
            first = await refused.recv(timeout=10)
            if first["type"] != "session.created":
                break
            admitted.append(refused)
        assert admitted and first["type"] == "error", first
        assert first["error"]["type"] == "rate_limit_error"
        with pytest.raises(websockets.ConnectionClosed):
            await refused.recv(timeout=10)
        await admitted.pop(0).close()  # a clean close ends the session at once
        for _ in range(50):
            late = await RealtimeClient.connect(url)
            first = await late.recv(timeout=10)
            if first["type"] == "session.created":
                admitted.append(late)
                break
            await late.ws.close()
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the closed session's slot never came back")
    finally:
        for c in admitted:
            await c.close()


async def test_a_url_that_cannot_open_a_session_is_refused_on_connect(
    synthetic_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(
        realtime_url(synthetic_stack.ports.gateway, "?session_id=not%20an%20id")
    )
    error = await client.recv(timeout=10)
    assert (error["error"]["code"], error["error"]["param"]) == (
        "invalid_value",
        "session.session_id",
    )
    with pytest.raises(websockets.ConnectionClosed) as closed:
        await client.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


async def test_the_duplex_dialect_still_opens_on_its_first_session_update(
    duplex_client: RealtimeClient,
) -> None:
    created = await duplex_client.open(**MANUAL)
    assert created["type"] == "session.created"
    # Nothing came on connect: the first event answers the first update, with its settings.
    assert [e["type"] for e in duplex_client.events] == ["session.created", "session.updated"]
    assert created["session"]["audio"]["input"]["turn_detection"] is None
    # The duplex extensions: the resume identity and the journal cursor.
    assert created["resume_token"] and created["server_event_seq"] == 1
    assert created["session"]["capabilities"]["implementation_level"]


@pytest.mark.models
async def test_the_same_turn_in_both_dialects_differs_only_by_the_extensions(
    client: RealtimeClient, duplex_client: RealtimeClient
) -> None:
    for c in (client, duplex_client):
        await c.open(**MANUAL)
        await c.append(weather_question())
        await c.send("input_audio_buffer.commit")
        await c.send("response.create")
        await c.response_cycle()
    plain = [e["type"] for e in client.events]
    duplex = [e["type"] for e in duplex_client.events]
    assert Counter(plain) == Counter(t for t in duplex if t != "response.speak")
    assert "response.speak" in duplex
    # OpenAI's order: the commit, then the user item it makes; the reference's:
    # the item, then the commit.
    committed, added = "input_audio_buffer.committed", "conversation.item.added"
    assert plain.index(committed) < plain.index(added)
    assert duplex.index(added) < duplex.index(committed)
