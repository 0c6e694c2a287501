"""A model-native full-duplex backend (the Moshi architecture) through the whole stack.

Real processes throughout: a gateway, a session replica, two stage0 workers
(`moshi`: Mimi's encoder and the LM, all sessions in lockstep) and two stage1
workers (`mimi`: Mimi's decoder), real Redis, real gRPC and WebSockets, the
`moshi` package's model code with the tiny random configuration. Its text
tokens are sampled, so the random model talks and goes quiet by itself as a
real one does: the tests hold the contract to whatever it decides.

The stack (`duplex_stack`, tests/conftest.py) starts once per test
session: GPT-Live's tests (test_live_sessions.py) talk to it too.

Audio goes out as a microphone sends it (a 200 ms append every 200 ms, then
live silence), in two voices at both input rates.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
from collections.abc import Callable
from typing import Any

import pytest
from openai import AsyncOpenAI
from stack import LocalStack

from antiphon.client import Microphone
from tests.support.realtime import (
    Event,
    RealtimeClient,
    duplex_url,
    of_type,
    realtime_url,
)
from tests.support.speech import VOICES, Voice, spoken
from tests.support.stacks import bound_worker, respawn

pytestmark = [pytest.mark.stack, pytest.mark.models]

QUESTION = "Hello there, how are you doing today?"
# What a response of this model looks like on the wire, in order.
OPENING = [
    "response.created",
    "conversation.item.added",
    "conversation.item.created",
    "response.output_item.added",
    "response.content_part.added",
]


def session(rate: int) -> dict[str, Any]:
    return {"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcm", "rate": rate}}}}


def responses(events: list[Event]) -> dict[str, list[Event]]:
    """Each response's events, by response id, in the order they came."""
    out: dict[str, list[Event]] = {}
    for e in events:
        rid = e.get("response", {}).get("id") or e.get("response_id")
        if rid:
            out.setdefault(rid, []).append(e)
    return out


def check_response(events: list[Event], *, duplex: bool) -> None:
    """One finished response keeps the normative contract."""
    types = [e["type"] for e in events]
    assert types.count("response.created") == 1, types
    assert types.count("response.done") == 1, types
    assert types[0] == "response.created" and types[-1] == "response.done", types
    assert [t for t in types if t in OPENING[3:]] == OPENING[3:], types
    if duplex:
        assert types.count("response.speak") == 1, types
        assert types.index("response.speak") < types.index("response.output_audio.delta")
    done = events[-1]["response"]
    deltas = of_type(events, "response.output_audio_transcript.delta")
    finals = of_type(events, "response.output_audio_transcript.done")
    joined = "".join(e["delta"] for e in deltas)
    if done["status"] == "completed":
        assert finals and finals[0]["transcript"] == joined
        [item] = done["output"]
        assert item["content"][0]["transcript"] == joined
    audio = [base64.b64decode(e["delta"]) for e in of_type(events, "response.output_audio.delta")]
    # Mimi's 80 ms frames at OpenAI's 24 kHz, PCM16: 3840 bytes each.
    assert audio and all(len(chunk) == 3840 for chunk in audio), [len(c) for c in audio]


async def talk(client: RealtimeClient, rate: int, voice: Voice, settle_s: float) -> None:
    async with Microphone(client, rate) as mic:
        await mic.say(spoken(QUESTION, rate, voice))
        # Live silence while the model goes on by itself.
        await asyncio.sleep(settle_s)


def test_the_stack_serves_from_the_float8_kv_cache_and_fails_over_to_the_models_dtype(
    duplex_stack: LocalStack,
) -> None:
    """The shared stack's formats (tests/conftest.py), as each worker loaded
    them: what the other tests here then ran on."""
    for name, kv_cache in (("stage0", "fp8"), ("stage0_b", "model")):
        loaded = [
            json.loads(line)
            for line in duplex_stack.log_path(name).read_text().splitlines()
            if '"duplex model loaded"' in line
        ]
        assert [entry["kv_cache"] for entry in loaded] == [kv_cache], name


@pytest.mark.parametrize("rate", [16000, 24000])
@pytest.mark.parametrize("voice", VOICES)
async def test_the_model_talks_by_itself_and_every_response_keeps_the_duplex_contract(
    duplex_stack: LocalStack, voice: Voice, rate: int
) -> None:
    client = await RealtimeClient.connect(duplex_url(duplex_stack.ports.gateway))
    try:
        created = await client.open(**session(rate))
        assert created["type"] == "session.created", created
        caps = created["session"]["capabilities"]
        assert (caps["implementation_level"], caps["chunk_period_ms"]) == (
            "model_native_duplex",
            80,
        )
        assert caps["supports_barge_in"] is False
        await talk(client, rate, voice, settle_s=2.0)
        await client.barrier()
    finally:
        await client.close()
    errors = of_type(client.events, "error")
    assert not errors, errors
    by_id = responses(client.events)
    finished = [evs for evs in by_id.values() if evs[-1]["type"] == "response.done"]
    assert finished, "the model never finished a response"
    for events in finished:
        check_response(events, duplex=True)
    # The model went quiet after each finished response (and said so).
    listens = of_type(client.events, "response.listen")
    assert len(listens) >= len([e for e in finished if e[-1]["response"]["status"] == "completed"])
    # At most one response at a time: each created comes after the previous done.
    order = [e["type"] for e in client.events if e["type"] in ("response.created", "response.done")]
    assert all(a != b for a, b in itertools.pairwise(order)), order
    seqs = [e["server_event_seq"] for e in client.events if "server_event_seq" in e]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def sdk_client(port: int) -> AsyncOpenAI:
    """The stock `openai` SDK pointed at the stack's gateway."""
    return AsyncOpenAI(
        api_key="unused",
        base_url=f"http://127.0.0.1:{port}/v1",
        websocket_base_url=f"ws://127.0.0.1:{port}/v1",
    )


async def sdk_spoken_exchange(port: int, model: str) -> list[Any]:
    """A question spoken at 24 kHz through the `openai` SDK, 200 ms every
    200 ms then live silence, until a response completes: every event, as the
    SDK parsed it."""
    pcm = spoken(QUESTION, 24000, "piper")
    seen: list[Any] = []
    async with sdk_client(port).realtime.connect(model=model) as conn:
        await conn.session.update(session={"type": "realtime", "output_modalities": ["audio"]})

        async def speak() -> None:
            chunk = 9600  # 200 ms at 24 kHz
            silence = b"\x00" * chunk
            for i in range(0, len(pcm) + 15 * chunk, chunk):
                piece = pcm[i : i + chunk] if i < len(pcm) else silence
                await conn.input_audio_buffer.append(audio=base64.b64encode(piece).decode())
                await asyncio.sleep(0.2)

        speaker = asyncio.create_task(speak())
        try:
            async with asyncio.timeout(60):
                async for event in conn:
                    seen.append(event)
                    if event.type == "response.done" and event.response.status == "completed":
                        break
        finally:
            speaker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await speaker
    return seen


def check_sdk_exchange(seen: list[Any]) -> None:
    """What the SDK parsed of a spoken exchange: no error, a completed
    response whose transcript is its deltas', its audio, and none of the
    duplex extensions (OpenAI's dialect carries none)."""
    types = [e.type for e in seen]
    assert "error" not in types, [e for e in seen if e.type == "error"]
    done = seen[-1].response
    assert done.status == "completed"
    transcript = "".join(
        e.delta for e in seen if e.type == "response.output_audio_transcript.delta"
    )
    assert done.output[0].content[0].transcript == transcript
    assert any(e.type == "response.output_audio.delta" for e in seen)
    assert not [t for t in types if t in ("response.speak", "response.listen")]


async def test_a_stock_openai_sdk_client_holds_a_spoken_exchange(
    duplex_stack: LocalStack,
) -> None:
    """The `openai` SDK, unmodified: OpenAI's default lane (server_vad), a
    question spoken at 24 kHz, and the model's answers as OpenAI events; every
    event parses under the SDK's own models (the client raises otherwise)."""
    check_sdk_exchange(await sdk_spoken_exchange(duplex_stack.ports.gateway, "antiphon-moshi"))


async def test_commit_and_response_create_never_answer_with_a_protocol_error(
    duplex_stack: LocalStack,
) -> None:
    """A push-to-talk client (turn detection off) commits and asks for a
    response: the commit records the user's item, and the response is the
    model's next speech."""
    client = await RealtimeClient.connect(realtime_url(duplex_stack.ports.gateway))
    try:
        created = await client.open(type="realtime", audio={"input": {"turn_detection": None}})
        assert created["type"] == "session.created", created
        async with Microphone(client, 24000) as mic:
            await mic.say(spoken(QUESTION, 24000, "espeak"))
            await client.send("input_audio_buffer.commit")
            committed = await client.until(
                lambda e: e["type"] in ("input_audio_buffer.committed", "error")
            )
            assert committed["type"] == "input_audio_buffer.committed", committed
            await client.until(lambda e: e["type"] == "response.done", timeout=30)
            await client.send("response.create")
            cycle = await client.response_cycle(timeout=30)
    finally:
        await client.close()
    assert not of_type(client.events, "error"), of_type(client.events, "error")
    check_response([e for e in cycle if e["type"] != "rate_limits.updated"], duplex=False)


async def response_in_flight(client: RealtimeClient) -> str:
    """The id of a response being spoken now. What the socket has queued is
    read up to the present first: a queued `response.created` may be of an
    answer that ended long ago."""
    await client.barrier()
    opened = [e["response"]["id"] for e in of_type(client.events, "response.created")]
    ended = {e["response"]["id"] for e in of_type(client.events, "response.done")}
    if opened and opened[-1] not in ended:
        return opened[-1]
    created = await client.until(lambda e: e["type"] == "response.created", timeout=30)
    return str(created["response"]["id"])


def done_of(response_id: str) -> Callable[[Event], bool]:
    return lambda e: e["type"] == "response.done" and e["response"]["id"] == response_id


async def kill_mid_response(
    stack: LocalStack, client: RealtimeClient, session_id: str, stage: str, spares: dict[str, int]
) -> tuple[str, str, int]:
    """kill -9 of the session's `stage` worker while a response is spoken: the
    worker killed (left dead: the caller brings it back), the response it
    failed, and how many events the client had before the kill.

    A random model's answer can be a single word: a kill that lands after it
    ended fails nothing. Then the worker comes back and the next answer, on
    the worker the session moved to, is tried."""
    for _ in range(3):
        victim = await bound_worker(stack, session_id, stage)
        rid = await response_in_flight(client)
        mark = len(client.events)
        stack.kill(victim)
        try:
            failed = await client.until(done_of(rid), timeout=30)
        except BaseException:
            respawn(stack, victim, stage, spares.get(victim, 0))
            raise
        if failed["response"]["status"] == "failed":
            assert failed["response"]["status_details"]["reason"] == f"{stage}_unavailable"
            return victim, rid, mark
        await asyncio.to_thread(respawn, stack, victim, stage, spares.get(victim, 0))
    pytest.fail(f"every answer ended before the kill of its {stage} landed")


@pytest.mark.parametrize("stage", ["stage0", "stage1"])
async def test_kill_9_of_a_worker_fails_the_response_in_flight_and_the_model_goes_on(
    duplex_stack: LocalStack, spare_ports: dict[str, int], stage: str
) -> None:
    client = await RealtimeClient.connect(duplex_url(duplex_stack.ports.gateway))
    victim = ""
    try:
        created = await client.open(**session(24000))
        assert created["type"] == "session.created", created
        sid = created["session"]["id"]
        async with Microphone(client, 24000) as mic:
            await mic.say(spoken(QUESTION, 24000, "piper"))
            victim, rid, mark = await kill_mid_response(
                duplex_stack, client, sid, stage, spare_ports
            )
            # The next response comes from the other worker.
            after = await client.until(
                lambda e: e["type"] == "response.done" and e["response"]["status"] == "completed",
                timeout=30,
            )
            assert after["response"]["id"] != rid
        assert await bound_worker(duplex_stack, sid, stage) != victim
    finally:
        await client.close()
        if victim:
            respawn(duplex_stack, victim, stage, spare_ports.get(victim, 0))
    resets = of_type(client.events[mark:], "error")
    if stage == "stage0":
        # The model's memory died with the worker, and the client is told.
        assert [e["error"]["code"] for e in resets] == ["model_context_reset"]
    else:
        assert not resets, resets


async def test_a_socket_dropped_mid_speech_resumes_with_every_event_once_in_order(
    duplex_stack: LocalStack,
) -> None:
    port = duplex_stack.ports.gateway
    client = await RealtimeClient.connect(duplex_url(port))
    created = await client.open(**session(24000))
    assert created["type"] == "session.created", created
    async with Microphone(client, 24000) as mic:
        await mic.say(spoken(QUESTION, 24000, "piper"))
        await client.until(lambda e: e["type"] == "response.output_audio.delta", timeout=30)
    seen = list(client.events)
    # The network goes: no close frame (a clean close would end the session).
    client.ws.transport.abort()
    with contextlib.suppress(Exception):
        await client.ws.wait_closed()
    await asyncio.sleep(0.5)
    again = await RealtimeClient.connect(duplex_url(port, "?autostart=0"))
    try:
        await again.send(
            "session.resume",
            session_id=created["session"]["id"],
            incarnation=created["incarnation"],
            resume_token=created["resume_token"],
            last_received_server_event_seq=seen[-1]["server_event_seq"],
        )
        resumed = await again.until(lambda e: e["type"] in ("session.resumed", "error"))
        assert resumed["type"] == "session.resumed", resumed
        # The response cut by the drop ends; the resumed session talks on.
        cut = await again.until(lambda e: e["type"] == "response.done", timeout=30)
        async with Microphone(again, 24000) as mic:
            await mic.say(spoken(QUESTION, 24000, "espeak"))
            nxt = await again.until(
                lambda e: (
                    e["type"] == "response.done" and e["response"]["id"] != cut["response"]["id"]
                ),
                timeout=30,
            )
        assert nxt["response"]["status"] in ("completed", "cancelled")
    finally:
        await again.close()
    events = seen + [e for e in again.events if e["type"] != "session.resumed"]
    seqs = [e["server_event_seq"] for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    first = [e for e in events if e.get("response", {}).get("id") == cut["response"]["id"]]
    assert [e["type"] for e in first].count("response.created") == 1
    joined = "".join(
        e["delta"]
        for e in events
        if e["type"] == "response.output_audio_transcript.delta"
        and e["response_id"] == cut["response"]["id"]
    )
    finals = [
        e
        for e in events
        if e["type"] == "response.output_audio_transcript.done"
        and e["response_id"] == cut["response"]["id"]
    ]
    assert not finals or finals[0]["transcript"] == joined
