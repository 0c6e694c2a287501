"""The native `/v1/duplex` route on the serving path: same sessions, the runner's names."""

from __future__ import annotations

import base64

import pytest
from stack import LocalStack

from tests.support.realtime import RealtimeClient, of_type
from tests.support.speech import spoken

pytestmark = [pytest.mark.stack, pytest.mark.models]


async def test_a_turn_over_v1_duplex_speaks_the_native_dialect(
    synthetic_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(
        f"ws://127.0.0.1:{synthetic_stack.ports.gateway}/v1/duplex"
    )
    try:
        # The runner's open handshake, its configuration at the top level.
        await client.send("session.create", turn_detection=None, instructions="Be brief.")
        created = await client.until(lambda e: e["type"] in ("session.created", "error"))
        assert created["type"] == "session.created", created
        assert created["session"]["turn_detection"] is None
        assert created["session"]["instructions"] == "Be brief."

        await client.append(spoken("What is the capital of France?"))
        await client.send("input.commit")
        await client.send("response.create")
        events = await client.response_cycle()
        types = [e["type"] for e in events]
        committed = of_type(events, "input.committed")
        assert len(committed) == 1 and "input_audio_buffer.committed" not in types
        assert committed[0]["turn_id"] >= 1 and committed[0]["realtime_item_id"]
        deltas = of_type(events, "response.output_audio.delta")
        assert deltas and all("audio" in d and "delta" not in d for d in deltas)
        assert base64.b64decode(deltas[0]["audio"])
        assert all(isinstance(d["audio_duration_ms"], int) for d in deltas)
        assert of_type(events, "response.done")[0]["response"]["status"] == "completed"
        seqs = [e["server_event_seq"] for e in client.events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

        # Text responses stream as `response.text.delta`.
        await client.append(spoken("Answer in text."))
        await client.send("input.commit")
        await client.send("response.create", response={"output_modalities": ["text"]})
        text = await client.response_cycle()
        assert of_type(text, "response.text.delta")
        assert not of_type(text, "response.output_text.delta")

        # A cancelled response ends as `audio.cancelled`, not `response.done`.
        await client.append(spoken("Tell me a long story."))
        await client.send("input.commit")
        await client.send("response.create")
        started = await client.until(lambda e: e["type"] == "response.created")
        await client.send("response.cancel")
        cancelled = await client.until(lambda e: e["type"] == "audio.cancelled")
        assert cancelled["response_id"] == started["response_id"]
        assert cancelled["reason"] == "client_cancelled"

        # Native errors are flat.
        await client.send("input.commit", event_id="evt_empty")
        err = await client.until(lambda e: e["type"] == "error")
        assert (err["code"], err["related_event_id"]) == ("input_audio_buffer_empty", "evt_empty")
        assert isinstance(err["error"], str)
    finally:
        await client.close()
