"""Tools end to end, on the real models (the default LLM, Qwen2.5-Coder-1.5B).

A spoken question that needs a declared function is answered with a call
(a `function_call` output item, its arguments streamed, no audio at all);
the function's result (`function_call_output` + `response.create`) is then
answered aloud; a question that needs no function is answered aloud. The
official `openai` SDK drives OpenAI's dialect, and every raw frame it
receives is judged by the SDK's models in strict mode; a raw client speaks
the duplex dialect, with a per-response `tool_choice`.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection
from stack import LocalStack

from tests.support import openai_models
from tests.support.realtime import MANUAL, RealtimeClient, ask, duplex_url, of_type
from tests.support.speech import spoken
from tests.support.weather import GET_WEATHER

pytestmark = [pytest.mark.stack, pytest.mark.models]

PARIS_WEATHER = {"city": "Paris", "temperature_c": 18, "sky": "sunny"}
INSTRUCTIONS = "You are a helpful voice assistant. Keep your answers short."
# A turn on two shared cores: ASR, up to three LLM passes, then speech.
TURN_TIMEOUT_S = 240


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9']+", text.lower()))


class StrictConnection:
    """The SDK's connection, every raw frame judged as it arrives, then parsed by the SDK."""

    def __init__(self, conn: AsyncRealtimeConnection) -> None:
        self.conn = conn
        self.frames: list[dict[str, Any]] = []

    async def until(self, wire_type: str) -> list[dict[str, Any]]:
        start = len(self.frames)
        while True:
            raw = await self.conn.recv_bytes()
            frame = json.loads(raw)
            assert openai_models.violations(frame) == [], frame
            self.conn.parse_event(raw)  # what the SDK hands its user
            self.frames.append(frame)
            assert frame["type"] != "error", frame
            if frame["type"] == wire_type:
                return self.frames[start:]

    async def open(self, **session: Any) -> dict[str, Any]:
        """After `session.created`: push-to-talk with `get_weather` (and `session`);
        the session `session.updated` shows."""
        await self.until("session.created")
        config: Any = {
            "type": "realtime",
            "instructions": INSTRUCTIONS,
            "output_modalities": ["audio"],
            "audio": {"input": {"turn_detection": None}},
            "tools": [GET_WEATHER],
            **session,
        }
        await self.conn.session.update(session=config)
        updated: dict[str, Any] = (await self.until("session.updated"))[-1]["session"]
        return updated

    async def ask(self, question: str) -> list[dict[str, Any]]:
        """A spoken question, committed and answered (`response.create`)."""
        audio = spoken(question, 24000)
        for i in range(0, len(audio), 9600):
            await self.conn.input_audio_buffer.append(audio=_b64(audio[i : i + 9600]))
        await self.conn.input_audio_buffer.commit()
        await self.conn.response.create()
        return await self.until("response.done")


def _b64(pcm: bytes) -> str:
    return base64.b64encode(pcm).decode()


def _done(events: list[dict[str, Any]]) -> dict[str, Any]:
    (done,) = of_type(events, "response.done")
    response: dict[str, Any] = done["response"]
    assert response["status"] == "completed", response
    return response


def _transcript(response: dict[str, Any]) -> str:
    return " ".join(
        part.get("transcript") or part.get("text") or ""
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def _the_call(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The one output item of a response that only calls, checked against its events."""
    response = _done(events)
    assert [i["type"] for i in response["output"]] == ["function_call"], response["output"]
    call: dict[str, Any] = response["output"][0]
    assert call["name"] == "get_weather" and call["call_id"]
    (done,) = of_type(events, "response.function_call_arguments.done")
    deltas = of_type(events, "response.function_call_arguments.delta")
    assert "".join(d["delta"] for d in deltas) == done["arguments"] == call["arguments"]
    assert (done["call_id"], done["item_id"], done["name"]) == (
        call["call_id"],
        call["id"],
        "get_weather",
    )
    added = [e["item"] for e in of_type(events, "response.output_item.added")]
    assert [(i["type"], i["status"]) for i in added] == [("function_call", "in_progress")]
    # A call is said as nothing.
    assert not of_type(events, "response.output_audio.delta", "response.content_part.added")
    return call


async def test_openai_sdk_a_weather_question_is_a_call_and_its_result_is_said(
    openai_client: AsyncOpenAI,
) -> None:
    async with openai_client.realtime.connect(model="antiphon-cascade") as raw:
        conn = StrictConnection(raw)
        updated = await conn.open(tool_choice="auto")
        assert [t["name"] for t in updated["tools"]] == ["get_weather"]
        assert updated["tool_choice"] == "auto"

        call = _the_call(await conn.ask("What is the weather in Paris?"))
        assert "paris" in json.loads(call["arguments"]).get("city", "").lower()

        await raw.conversation.item.create(
            item={
                "type": "function_call_output",
                "call_id": call["call_id"],
                "output": json.dumps(PARIS_WEATHER),
            }
        )
        await raw.response.create()
        answer = await conn.until("response.done")
        response = _done(answer)
        assert [i["type"] for i in response["output"]] == ["message"]
        said = words(_transcript(response))
        assert said & {"18", "eighteen", "sunny"}, said
        assert of_type(answer, "response.output_audio.delta")
    assert not of_type(conn.frames, "error")


async def test_openai_sdk_a_question_that_needs_no_function_is_answered_aloud(
    openai_client: AsyncOpenAI,
) -> None:
    async with openai_client.realtime.connect(model="antiphon-cascade") as raw:
        conn = StrictConnection(raw)
        await conn.open()
        events = await conn.ask("What is the capital of France?")
        response = _done(events)
        assert [i["type"] for i in response["output"]] == ["message"], response["output"]
        assert "paris" in words(_transcript(response))
        assert not of_type(events, "response.function_call_arguments.done")
        assert of_type(events, "response.output_audio.delta")


async def test_duplex_a_forced_function_is_called_and_the_session_shows_its_tools(
    model_stack: LocalStack,
) -> None:
    """`response.create`'s own `tool_choice` names the function; the call comes
    with the duplex envelope, and its result is answered aloud."""
    client = await RealtimeClient.connect(duplex_url(model_stack.ports.gateway))
    try:
        created = await client.open(**MANUAL, instructions=INSTRUCTIONS, tools=[GET_WEATHER])
        assert created["type"] == "session.created", created
        (updated,) = of_type(client.events, "session.updated")
        assert updated["session"]["tools"][0]["name"] == "get_weather"
        forced = {"type": "function", "name": "get_weather"}
        events = await ask(client, spoken("How warm is it in Tokyo right now?"), tool_choice=forced)
        call = _the_call(events)
        assert "tokyo" in json.loads(call["arguments"]).get("city", "").lower()
        assert all("server_event_seq" in e for e in events)
        await client.send(
            "conversation.item.create",
            item={
                "type": "function_call_output",
                "call_id": call["call_id"],
                "output": json.dumps({"city": "Tokyo", "temperature_c": 27, "sky": "clear"}),
            },
        )
        await client.send("response.create")
        answer = await client.response_cycle(timeout=TURN_TIMEOUT_S)
        response = _done(answer)
        assert words(_transcript(response)) & {"27", "twenty", "seven", "clear"}, response
        assert not of_type(client.events, "error")
    finally:
        await client.close()
