"""Hundreds of hostile client events over one real socket: each gets at most one
error, the socket stays open, and the session still answers a normal turn after.

The events come from `tests/support/fuzz.py` (derandomized: the same ones each
run), each sent with an `event_id` of ours and followed by a barrier (a
heartbeat the session answers in order), so what each event caused is what
came before the barrier's answer. A few are raw frames no strategy of
dicts can make: not JSON, a JSON array, a lone surrogate in an `event_id`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from stack import LocalStack

from tests.support.fuzz import ERROR_TYPES, FUZZ, client_events
from tests.support.realtime import MANUAL, Event, RealtimeClient, duplex_url, of_type
from tests.support.speech import silence

pytestmark = pytest.mark.stack

EVENTS = 300
# These end the session on purpose; a session that ended cannot show it survived.
ENDING = {"session.close", "close", "close_session", "session_close"}
RAW_FRAMES = [
    "not json",
    "[1, 2, 3]",
    '{"type": "session.heartbeat", "event_id": "\\ud800"}',
    '{"type": "no.such.type", "event_id": "\\udfff"}',
    '{"type": "input_audio_buffer.append", "audio": "\\ud800"}',
    '{"type": "response.create", "response": {"metadata": {"\\ud800": 1}}}',
    "{" * 5000,
    '{"type": ' + '"x' * 10000 + '"}',
]


def generated_events() -> list[Any]:
    """The fuzzer's events, collected once (the test drives one socket through all)."""
    out: list[Any] = []

    @settings(FUZZ, max_examples=EVENTS)
    @given(client_events())
    def collect(event: Any) -> None:
        if not (isinstance(event, dict) and str(event.get("type")) in ENDING):
            out.append(json.loads(json.dumps(event)))

    collect()
    return out


def _check_error(ev: Event, sent: str) -> None:
    err = ev["error"]
    assert err["type"] in ERROR_TYPES, (sent, ev)
    assert isinstance(err["code"], str) and err["code"], (sent, ev)
    assert isinstance(err["message"], str) and err["message"], (sent, ev)


async def _barrier(client: RealtimeClient, probe: str) -> list[Event]:
    """What came until the session answered a probe sent now. Not a heartbeat
    (`RealtimeClient.barrier`): a fuzzed heartbeat's ack would answer it. The
    retrieve of an id no item has is refused naming the probe's own event_id."""
    start = len(client.events)
    await client.send("conversation.item.retrieve", item_id="item_fuzz_probe", event_id=probe)
    await client.until(lambda e: e["type"] == "error" and e["error"].get("event_id") == probe)
    return client.events[start:-1]


async def _answered(client: RealtimeClient, frame: str, event_id: str) -> list[Event]:
    """What the session sent for one frame, up to the barrier after it."""
    await client.ws.send(frame)
    caused = await _barrier(client, f"{event_id or 'evt_raw'}_probe")
    errors = of_type(caused, "error")
    for ev in errors:
        _check_error(ev, frame[:300])
    mine = [e for e in errors if e["error"].get("event_id") in (event_id, "", None)]
    assert len(mine) <= 1, (frame[:300], mine)
    return caused


async def test_hostile_events_get_at_most_one_error_each_and_the_session_survives(
    synthetic_stack: LocalStack,
) -> None:
    client = await RealtimeClient.connect(duplex_url(synthetic_stack.ports.gateway))
    try:
        created = await client.open(**MANUAL)
        assert created["type"] == "session.created", created
        refused = 0
        for i, event in enumerate(generated_events()):
            event_id = f"evt_fuzz_{i}"
            if isinstance(event, dict):
                event["event_id"] = event_id
            caused = await _answered(client, json.dumps(event), event_id)
            refused += bool(of_type(caused, "error"))
        for frame in RAW_FRAMES:
            caused = await _answered(client, frame, "")
            assert of_type(caused, "error"), frame[:100]
        # A generator that made only junk (or only valid events) would prove little.
        assert 0.2 * EVENTS < refused < 0.98 * EVENTS, refused
        await normal_turn(client)
    finally:
        await client.close()


async def normal_turn(client: RealtimeClient) -> None:
    """Whatever the fuzzed updates set, put back a plain session and answer a turn."""
    await client.send("response.cancel")
    await client.send("input_audio_buffer.clear")
    await client.send(
        "session.update",
        session={
            **MANUAL,
            "output_modalities": ["audio"],
            "instructions": "",
            "tools": [],
            "tool_choice": "auto",
            "audio": {
                "input": {"format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None},
                "output": {"format": {"type": "audio/pcm", "rate": 24000}},
            },
        },
    )
    await _barrier(client, "evt_reset_probe")
    await client.append(silence(600))
    await client.send("input_audio_buffer.commit")
    await client.send("response.create")
    cycle = await client.response_cycle(timeout=60)
    done = of_type(cycle, "response.done")[-1]["response"]
    assert done["status"] == "completed", done
