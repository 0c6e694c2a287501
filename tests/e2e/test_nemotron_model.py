"""Nemotron VoiceChat (stage0 and stage1 `nemotron`, NeMo's model code) behind
the whole stack, tiny and random: clients hold spoken exchanges with it as
with the Moshi architecture (the same duplex contract per response), a
worker killed mid-answer is survived, and a tool is called and answered
through the stock `openai` SDK and run by the OpenAI Agents SDK.

Two stacks: `random:tiny` (quiet in silence, talking over speech) for the
exchanges, with a spare worker of each stage to fail over to; and the tiny
checkpoint whose function head echoes its channel (tests/support/nemotron.py)
for the tool call, forced into the model's own function channel by a system
message.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stack import LocalStack, Ports, free_port

from antiphon.client import Microphone
from tests.clients.harness import Utterance, drive, no_errors, scenario_ok
from tests.e2e.test_duplex_model import (
    QUESTION,
    check_response,
    kill_mid_response,
    responses,
    sdk_client,
    sdk_spoken_exchange,
    session,
)
from tests.e2e.test_duplex_model import (
    test_a_socket_dropped_mid_speech_resumes_with_every_event_once_in_order as resumes_in_order,
)
from tests.support.nemotron import tools_checkpoint
from tests.support.realtime import RealtimeClient, duplex_url, of_type
from tests.support.speech import VOICES, Voice, spoken
from tests.support.stacks import bound_worker, respawn, started

pytestmark = [pytest.mark.stack, pytest.mark.models]

PROFILE = Path(__file__).parents[2] / "deploy" / "profiles" / "nemotron.yaml"
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CALL = (
    '<SPECIAL_20><TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
    "</TOOLCALL><SPECIAL_21>"
)


def _env(checkpoint: str, ports: Ports, spares: dict[str, int]) -> dict[str, str]:
    env = {
        "ANTIPHON_DUPLEX_CHECKPOINT": checkpoint,
        "ANTIPHON_DUPLEX_QUIET_FRAMES": "2",
        "ANTIPHON_CAPACITY": "3",
        "ANTIPHON_MAX_SESSIONS": "4",
        "ANTIPHON_DISCONNECT_GRACE_S": "10",
    }
    if spares:
        stage0 = [ports.stage0, spares["stage0_b"]]
        stage1 = [ports.stage1, spares["stage1_b"]]
        env["ANTIPHON_STAGE0_ADDRESSES"] = json.dumps([f"127.0.0.1:{p}" for p in stage0])
        env["ANTIPHON_STAGE1_ADDRESSES"] = json.dumps([f"127.0.0.1:{p}" for p in stage1])
    return env


@pytest.fixture(scope="module")
def spares() -> dict[str, int]:
    return {"stage0_b": free_port(), "stage1_b": free_port()}


@pytest.fixture(scope="module")
def nemotron_stack(request: pytest.FixtureRequest, spares: dict[str, int]) -> Iterator[LocalStack]:
    ports = Ports.free()
    stack = LocalStack(ports=ports, profile=PROFILE, extra_env=_env("random:tiny", ports, spares))
    with started(request, stack, timeout_s=240):
        stack.spawn_grpc("stage0_b", "stage0", spares["stage0_b"], free_port())
        stack.spawn_grpc("stage1_b", "stage1", spares["stage1_b"], free_port())
        stack.wait_grpc_ready(spares["stage0_b"], "antiphon.v1.Stage0Service")
        stack.wait_grpc_ready(spares["stage1_b"], "antiphon.v1.Stage1Service")
        yield stack


@pytest.fixture(scope="module")
def tools_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalStack]:
    folder = tools_checkpoint(tmp_path_factory.mktemp("nemotron-tools"))
    ports = Ports.free()
    stack = LocalStack(ports=ports, profile=PROFILE, extra_env=_env(str(folder), ports, {}))
    with started(request, stack, timeout_s=240):
        yield stack


@pytest.mark.parametrize("rate", [16000, 24000])
@pytest.mark.parametrize("voice", VOICES)
async def test_the_model_talks_over_speech_and_every_response_keeps_the_duplex_contract(
    nemotron_stack: LocalStack, voice: Voice, rate: int
) -> None:
    client = await RealtimeClient.connect(duplex_url(nemotron_stack.ports.gateway))
    try:
        created = await client.open(**session(rate))
        assert created["type"] == "session.created", created
        caps = created["session"]["capabilities"]
        assert (caps["implementation_level"], caps["chunk_period_ms"]) == (
            "model_native_duplex",
            80,
        )
        assert caps["supports_barge_in"] is False
        async with Microphone(client, rate) as mic:
            await mic.say(spoken(QUESTION, rate, voice))
            await asyncio.sleep(2.0)  # live silence: the model goes quiet
        await client.barrier()
    finally:
        await client.close()
    errors = of_type(client.events, "error")
    assert not errors, errors
    finished = [
        evs for evs in responses(client.events).values() if evs[-1]["type"] == "response.done"
    ]
    assert finished, (
        "the model never finished a response",
        [e["type"] for e in client.events][-60:],
    )
    for events in finished:
        check_response(events, duplex=True)


async def test_a_stock_openai_sdk_client_holds_a_spoken_exchange(
    nemotron_stack: LocalStack,
) -> None:
    """The `openai` SDK, unmodified, at 24 kHz: the model's answer as OpenAI
    events, each parsed by the SDK's own models."""
    seen = await sdk_spoken_exchange(nemotron_stack.ports.gateway, "antiphon-nemotron")
    types = [e.type for e in seen]
    assert "error" not in types, [e for e in seen if e.type == "error"]
    done = seen[-1].response
    transcript = "".join(
        e.delta for e in seen if e.type == "response.output_audio_transcript.delta"
    )
    assert done.output[0].content[0].transcript == transcript
    assert any(e.type == "response.output_audio.delta" for e in seen)


@pytest.mark.parametrize("stage", ["stage0", "stage1"])
async def test_kill_9_of_a_worker_fails_the_response_in_flight_and_the_model_goes_on(
    nemotron_stack: LocalStack, spares: dict[str, int], stage: str
) -> None:
    client = await RealtimeClient.connect(duplex_url(nemotron_stack.ports.gateway))
    victim = ""
    try:
        created = await client.open(**session(24000))
        sid = created["session"]["id"]
        async with Microphone(client, 24000) as mic:
            await mic.say(spoken(QUESTION * 3, 24000, "piper"))
            victim, rid, _ = await kill_mid_response(nemotron_stack, client, sid, stage, spares)
            await mic.say(spoken(QUESTION, 24000, "espeak"))
            after = await client.until(
                lambda e: e["type"] == "response.done" and e["response"]["status"] == "completed",
                timeout=30,
            )
            assert after["response"]["id"] != rid
        assert await bound_worker(nemotron_stack, sid, stage) != victim
    finally:
        await client.close()
        if victim:
            respawn(nemotron_stack, victim, stage, spares.get(victim, 0))


async def test_a_socket_dropped_mid_speech_resumes_with_every_event_once_in_order(
    nemotron_stack: LocalStack,
) -> None:
    """Resume (the reference says yes for this model): the Moshi stack's test,
    on this one."""
    await resumes_in_order(nemotron_stack)


async def test_a_stock_openai_sdk_client_calls_a_tool_and_answers_it(
    tools_stack: LocalStack,
) -> None:
    """The session's tool goes into the model's prompt; a system message puts
    a call into its function channel, which its own head says back: the SDK
    gets the call as OpenAI's events, answers it with a `function_call_output`
    that goes into the running model, and nothing errs."""
    seen: list[Any] = []
    async with sdk_client(tools_stack.ports.gateway).realtime.connect(
        model="antiphon-nemotron"
    ) as conn:
        await conn.session.update(session={"type": "realtime", "tools": [WEATHER]})
        await conn.conversation.item.create(
            item={
                "type": "message",
                "role": "system",
                "content": [{"type": "input_text", "text": CALL}],
            }
        )
        async with asyncio.timeout(60):
            async for event in conn:
                seen.append(event)
                if event.type == "response.done":
                    break
        done = seen[-1].response
        [call] = [item for item in done.output if item.type == "function_call"]
        await conn.conversation.item.create(
            item={"type": "function_call_output", "call_id": call.call_id, "output": '{"c": 21}'}
        )
        async with asyncio.timeout(20):
            async for event in conn:
                seen.append(event)
                if (
                    event.type == "conversation.item.done"
                    and event.item.type == "function_call_output"
                ):
                    break
    types = [e.type for e in seen]
    assert "error" not in types, [e for e in seen if e.type == "error"]
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    [args] = [e for e in seen if e.type == "response.function_call_arguments.done"]
    assert (args.call_id, json.loads(args.arguments)) == (call.call_id, {"city": "Paris"})


def test_the_agents_sdk_runs_the_tool_the_model_calls_and_its_output_goes_back(
    tools_stack: LocalStack, tmp_path: Path
) -> None:
    """A `RealtimeAgent` with a `function_tool`, the SDK's stock settings: the
    call the model says back (put into its channel by a system message the
    app sends through the SDK's raw client events) is run by the SDK itself,
    whose `function_call_output` the server acknowledges; no frame errs or
    fails the SDK's validation (tests/clients/drive_agents_nemotron_tool.py)."""
    port = tools_stack.ports.gateway
    question = Utterance("What is the weather in Paris?", "espeak", frozenset())
    options = ["--model", "antiphon-nemotron", "--call", CALL, "--timeout", "30"]
    record = drive(
        "drive_agents_nemotron_tool.py",
        f"ws://127.0.0.1:{port}/v1",
        question,
        None,
        tmp_path,
        options=options,
    )
    scenario_ok(record)
    no_errors(record)
    facts = record["facts"]
    assert facts["tool_starts"] == [WEATHER["name"]], facts
    [ran] = facts["tool_ends"]
    assert (ran["name"], json.loads(ran["arguments"])) == (WEATHER["name"], {"city": "Paris"})
    assert facts["function_ran_with"] == ["Paris"]
    assert json.loads(ran["output"])["city"] == "Paris"
    # The output the SDK sent went into the conversation, for the call the model made.
    [call_id] = facts["calls"]
    assert facts["outputs_acked"]["conversation.item.done"] == [call_id], facts
    # The SDK's `response.create` after it was accepted, not refused.
    assert len(record["created"]) == 2, record["created"]
