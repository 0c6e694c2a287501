"""Capacity follows the sockets: a stage slot is held by an attached session only.

Real processes (gateway, session service, `synthetic` stage workers with
room for two sessions each), real Redis, real gRPC and WebSockets. A client
that closes its socket cleanly (1000/1001) ends its session at once, unless
it made the session resumable; a dropped connection leaves the session
resumable for its grace period with no stage slot, and a resume binds again.
Resuming is the duplex dialect's (`?duplex=1`: the resume token rides its
`session.created`), so every client here speaks it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import time
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from stack import LocalStack

from antiphon.common import g711
from antiphon.common.workers import WorkerRegistry
from tests.support.polling import eventually
from tests.support.realtime import MANUAL, Event, RealtimeClient, duplex_url, of_type
from tests.support.speech import spoken

pytestmark = pytest.mark.stack

# The synthetic ASR reports how much 16 kHz audio it was given.
HEARD = re.compile(r"synthetic utterance of (\d+) milliseconds")


def url(stack: LocalStack, query: str = "") -> str:
    return duplex_url(stack.ports.gateway, query)


@pytest.fixture
async def workers(two_slot_stack: LocalStack) -> AsyncIterator[WorkerRegistry]:
    client = aioredis.Redis.from_url(two_slot_stack.redis_url)
    try:
        yield WorkerRegistry(client)
    finally:
        await client.aclose()


async def load(workers: WorkerRegistry) -> tuple[int, int]:
    """Sessions bound to the stage0 and the stage1 worker, as they publish it."""
    stage0, stage1 = (await workers.workers("stage0")), (await workers.workers("stage1"))
    return sum(w.active for w in stage0), sum(w.active for w in stage1)


async def load_is(workers: WorkerRegistry, expected: tuple[int, int]) -> None:
    async def check() -> bool:
        return await load(workers) == expected

    await eventually(check)


async def drop(client: RealtimeClient) -> None:
    """The network goes: the TCP connection dies with no close frame."""
    client.ws.transport.abort()
    with contextlib.suppress(Exception):
        await client.ws.wait_closed()


async def resume(stack: LocalStack, created: Event, last: RealtimeClient) -> RealtimeClient:
    """A new socket resuming `created`'s session after the last event `last` received."""
    again = await RealtimeClient.connect(url(stack, "?autostart=0"))
    await again.send(
        "session.resume",
        session_id=created["session"]["id"],
        incarnation=created["incarnation"],
        resume_token=created["resume_token"],
        last_received_server_event_seq=last.events[-1]["server_event_seq"],
    )
    return again


async def resumed(client: RealtimeClient) -> Event:
    answer = await client.until(lambda e: e["type"] in ("session.resumed", "error"))
    assert answer["type"] == "session.resumed", answer
    return answer


async def text_turn(client: RealtimeClient, text: str) -> list[Event]:
    """A user text item and a response to it: the events through `rate_limits.updated`."""
    await client.send(
        "conversation.item.create",
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    )
    await client.send("response.create")
    return await client.response_cycle(timeout=30)


def status(cycle: list[Event]) -> tuple[str, str | None]:
    response = of_type(cycle, "response.done")[0]["response"]
    details = response["status_details"] or {}
    return response["status"], details.get("reason")


def closed_by_clients(stack: LocalStack, reason: str) -> float:
    """The session service's `antiphon_session_closed_total{reason=...}`."""
    metrics_url = f"http://127.0.0.1:{stack.ports.session_metrics}/metrics"
    with urllib.request.urlopen(metrics_url, timeout=5) as r:
        text = r.read().decode()
    found = re.search(rf'^antiphon_session_closed_total{{reason="{reason}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


async def opened(
    stack: LocalStack, query: str = "", **session: Any
) -> tuple[RealtimeClient, Event]:
    client = await RealtimeClient.connect(url(stack, query))
    created = await client.open(**{**MANUAL, **session})
    assert created["type"] == "session.created", created
    return client, created


# ------------------------------------------------------------ clean close
@pytest.mark.parametrize("code", [1000, 1001])
async def test_six_quick_open_close_cycles_at_capacity_two_are_all_admitted(
    two_slot_stack: LocalStack, workers: WorkerRegistry, code: int
) -> None:
    """A clean close with no `session.close` ends the session at once: admission
    and both stage slots are free for the next, so none is `resource_exhausted`."""
    await load_is(workers, (0, 0))
    before = closed_by_clients(two_slot_stack, "client_closed")
    for cycle in range(6):
        client = await RealtimeClient.connect(url(two_slot_stack))
        created = await client.open(**MANUAL)
        assert created["type"] == "session.created", (cycle, created)
        await client.ws.close(code=code)
    await load_is(workers, (0, 0))
    assert closed_by_clients(two_slot_stack, "client_closed") - before == 6


async def test_a_cleanly_closed_session_is_over_and_cannot_be_resumed(
    two_slot_stack: LocalStack,
) -> None:
    client, created = await opened(two_slot_stack)
    await client.ws.close()
    again = await resume(two_slot_stack, created, client)
    try:
        err = await again.until(lambda e: e["type"] == "error")
        assert err["error"]["code"] == "session_resume_expired"
    finally:
        await again.ws.close()


@pytest.mark.parametrize("opt_in", ["session.resumable", "?resumable=1"])
async def test_a_resumable_session_survives_a_clean_close_without_a_stage_slot(
    two_slot_stack: LocalStack, workers: WorkerRegistry, opt_in: str
) -> None:
    await load_is(workers, (0, 0))
    if opt_in == "session.resumable":
        client, created = await opened(two_slot_stack, resumable=True)
    else:
        client, created = await opened(two_slot_stack, "?resumable=1")
    assert created["session"]["resumable"] is True
    assert status(await text_turn(client, "Remember the colour teal.")) == ("completed", None)
    await client.ws.close()  # 1000, and no session.close
    await load_is(workers, (0, 0))
    again = await resume(two_slot_stack, created, client)
    try:
        back = await resumed(again)
        assert back["session"]["resumable"] is True
        assert status(await text_turn(again, "And now?")) == ("completed", None)
        await load_is(workers, (1, 1))
    finally:
        await again.close()


# -------------------------------------------------------------- drops
async def test_a_dropped_session_holds_no_stage_slot_and_answers_with_its_history_10_s_later(
    two_slot_stack: LocalStack, workers: WorkerRegistry
) -> None:
    await load_is(workers, (0, 0))
    first, created = await opened(two_slot_stack, extra_body={"return_stage_metrics": True})
    assert status(await text_turn(first, "The secret word is heliotrope.")) == ("completed", None)
    await drop(first)
    dropped_at = time.monotonic()
    # Detached: both of its slots are back on the workers...
    await load_is(workers, (0, 0))
    others = [await opened(two_slot_stack) for _ in range(2)]
    # ...and two other sessions take the whole capacity meanwhile.
    await load_is(workers, (2, 2))
    try:
        # With no room, a resume is refused and changes nothing: the session
        # stays resumable, and the same token still works once a slot frees.
        full = await resume(two_slot_stack, created, first)
        err = await full.until(lambda e: e["type"] == "error")
        assert (err["error"]["type"], err["error"]["code"]) == (
            "rate_limit_error",
            "resource_exhausted",
        )
        await full.ws.close()
        await others.pop()[0].ws.close()
        await load_is(workers, (1, 1))  # that session ended: a slot on each worker is free
        # Not a barrier: the claim is about a session detached for 10 s.
        await asyncio.sleep(max(0.0, 10.0 - (time.monotonic() - dropped_at)))
        again = await resume(two_slot_stack, created, first)
        try:
            back = await resumed(again)
            assert back["session"]["extra_body"]["return_stage_metrics"] is True
            cycle = await text_turn(again, "What was the secret word?")
            assert status(cycle) == ("completed", None)
            done = of_type(cycle, "response.done")[0]["response"]
            prompt = done["metadata"]["stage_metrics"]["prompt"]
            # The prompt is built from the whole history: both turns and the answer.
            assert "The secret word is heliotrope." in prompt
            assert "You said: The secret word is heliotrope" in prompt
            assert prompt.index("heliotrope") < prompt.index("What was the secret word?")
        finally:
            await again.close()
    finally:
        for client, _ in others:
            await client.close()


async def test_a_response_in_flight_at_a_drop_ends_cancelled_and_the_next_turn_works(
    two_slot_stack: LocalStack, workers: WorkerRegistry
) -> None:
    first, created = await opened(two_slot_stack)
    await first.send(
        "conversation.item.create",
        item={
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Tell me a long story about the sea."}],
        },
    )
    await first.send("response.create")
    await first.until(lambda e: e["type"] == "response.output_audio.delta")
    await drop(first)
    await load_is(workers, (0, 0))
    again = await resume(two_slot_stack, created, first)
    try:
        await resumed(again)
        rest = await again.response_cycle(timeout=30)
        # Its stage work went with the slots: it ends, with a reason, never left open.
        assert status(rest) == ("cancelled", "client_disconnected")
        seqs = [e["server_event_seq"] for e in first.events + rest]
        assert seqs == list(range(1, len(seqs) + 1))
        assert status(await text_turn(again, "Are you still there?")) == ("completed", None)
    finally:
        await again.close()


# ------------------------------------------------------------- formats
@pytest.mark.models
async def test_a_resumed_g711_session_keeps_its_formats_without_a_session_update(
    two_slot_stack: LocalStack,
) -> None:
    """The new socket hears and speaks mu-law as the first did: appends that name
    no format are read as G.711, and the answer is 8 kHz at one byte a sample."""
    first, created = await opened(
        two_slot_stack,
        audio={
            "input": {"format": {"type": "audio/pcmu"}, "turn_detection": None},
            "output": {"format": {"type": "audio/pcmu"}},
        },
    )
    await drop(first)
    again = await resume(two_slot_stack, created, first)
    try:
        back = await resumed(again)
        assert back["session"]["audio"]["output"]["format"] == {"type": "audio/pcmu"}
        assert back["session"]["audio"]["input"]["format"] == {"type": "audio/pcmu"}
        ulaw = g711.pcm16_to_ulaw(spoken("What is the capital of France?", 8000))
        for i in range(0, len(ulaw), 1600):  # 200 ms of 8 kHz, one byte a sample
            await again.send(
                "input_audio_buffer.append", audio=base64.b64encode(ulaw[i : i + 1600]).decode()
            )
        await again.send("input_audio_buffer.commit")
        heard = await again.until(
            lambda e: e["type"] == "conversation.item.input_audio_transcription.completed"
        )
        found = HEARD.search(heard["transcript"])
        assert found is not None, heard
        # Read as PCM16 the same bytes would be half as long.
        assert abs(int(found.group(1)) - len(ulaw) * 1000 // 8000) <= 5
        await again.send("response.create")
        cycle = await again.response_cycle(timeout=30)
        assert status(cycle) == ("completed", None)
        deltas = of_type(cycle, "response.output_audio.delta")
        assert deltas
        assert {(d["format"], d["sample_rate_hz"]) for d in deltas} == {("g711_ulaw", 8000)}
        coded = b"".join(base64.b64decode(d["delta"]) for d in deltas)
        total_ms = deltas[-1]["metadata"]["audio_duration_ms"]
        # One byte per 8 kHz sample (PCM16 would be two, at 24 kHz six).
        assert len(coded) == total_ms * 8000 // 1000
    finally:
        await again.close()
