"""GPT-Live's Responses delegation and context appends, through the whole stack: the voice is the
Moshi architecture (`duplex_stack`, tiny random), the delegate is the
cascade's real LLM (`model_stack`'s stage0 worker, Qwen2.5-Coder-1.5B).

A session replica configured with that delegate (`delegate_addresses`) and
a gateway in front of it join the duplex stack. The client streams live
audio (200 ms every 200 ms: the timeline moves only with it), adds a user
message (`response.item.create`) and asks (`response.create`); the delegate
answers with a forced `get_weather` call, told as `response.event`s; the
client answers the call (`function_call_output`), lets the delegate choose
freely (`session.update`), asks again, and the delegate's words come back
as text, which goes into the voice model's context for it to say (its
output transcript holds the words). A commentary append is said the same
way, and told when taken. Every frame is judged by the stock SDK's GPT-Live
models in strict mode.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import websockets
from stack import LocalStack, free_port

from antiphon.common import moshi_checkpoint
from antiphon.stage0.backends.moshi.prompt import text_encoder
from tests.support.live_models import violations
from tests.support.weather import GET_WEATHER

pytestmark = [pytest.mark.stack, pytest.mark.models]

Frame = dict[str, Any]
FORCED = {"type": "function", "name": "get_weather"}
# Two LLM passes on two shared cores, beside the voice model's clock.
ANSWER_TIMEOUT_S = 180
CHUNK = bytes(9600)  # 200 ms of silence at 24 kHz
TRANSCRIPT = "session.output_transcript.delta"


@pytest.fixture(scope="module")
def delegating_gateway(duplex_stack: LocalStack, model_stack: LocalStack) -> Iterator[int]:
    """A session replica whose delegate is the cascade's stage0 worker, and a
    gateway in front of it, on the duplex stack's workers; its port."""
    session_port, gateway_port = free_port(), free_port()
    delegate = f'["127.0.0.1:{model_stack.ports.stage0}"]'
    duplex_stack.spawn_grpc(
        "session_delegating",
        "session",
        session_port,
        free_port(),
        ANTIPHON_DELEGATE_ADDRESSES=delegate,
    )
    duplex_stack.spawn_gateway(
        "gateway_delegating", gateway_port, ANTIPHON_SESSION_ADDRESS=f"127.0.0.1:{session_port}"
    )
    duplex_stack.wait_ready(120, gateway_port=gateway_port)
    yield gateway_port
    for name in ("gateway_delegating", "session_delegating"):
        duplex_stack.kill(name)


class LiveSocket:
    """A GPT-Live socket with a live microphone (silence, in real time)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.frames: list[Frame] = []
        self._seen = 0

    async def send(self, event: Frame) -> None:
        await self.ws.send(json.dumps(event))

    async def microphone(self) -> None:
        audio = base64.b64encode(CHUNK).decode()
        while True:
            await self.send({"type": "session.input_audio.append", "audio": audio})
            await asyncio.sleep(0.2)

    async def until(self, done: Callable[[Frame], bool], timeout_s: float) -> list[Frame]:
        """Frames from the last wait on, through the first that is `done`."""
        async with asyncio.timeout(timeout_s):
            while True:
                while self._seen < len(self.frames):
                    self._seen += 1
                    if done(self.frames[self._seen - 1]):
                        return self.frames[: self._seen]
                self.frames.append(json.loads(await self.ws.recv()))


@contextlib.asynccontextmanager
async def live(port: int, session: Frame) -> AsyncIterator[LiveSocket]:
    url = f"ws://127.0.0.1:{port}/v1/live/sessions"
    async with websockets.connect(url, max_size=None) as ws:
        sock = LiveSocket(ws)
        await sock.send({"type": "session.start", "event_id": "start", "session": session})
        [*_, started] = await sock.until(lambda f: f["type"] != "session.output_audio.delta", 30)
        assert started["type"] == "session.started", started
        mic = asyncio.create_task(sock.microphone())
        try:
            yield sock
        finally:
            mic.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await mic
            await sock.send({"type": "session.close", "event_id": "close"})
            with contextlib.suppress(TimeoutError, websockets.ConnectionClosed):
                await sock.until(lambda f: f["type"] == "session.closed", 10)
    bad = [(f["type"], v) for f in sock.frames if (v := violations(f))]
    assert bad == [], bad


def envelopes(frames: list[Frame]) -> list[Frame]:
    return [f["event"] for f in frames if f["type"] == "response.event"]


def ended(frame: Frame) -> bool:
    event = frame.get("event", {}) if frame["type"] == "response.event" else {}
    return event.get("type") in ("response.completed", "response.failed", "response.incomplete")


async def test_a_tool_call_round_trips_through_the_delegate_and_the_voice_says_its_answer(
    delegating_gateway: int,
) -> None:
    responses = {
        "model": "antiphon-delegate",
        "instructions": "You are a weather assistant. Answer in one short sentence.",
        "tools": [GET_WEATHER],
        "tool_choice": FORCED,
    }
    session = {"model": "gpt-live-1", "delegation": {"type": "responses", "responses": responses}}
    async with live(delegating_gateway, session) as sock:
        ask = {"role": "user", "content": "What is the weather in Paris right now?"}
        await sock.send({"type": "response.item.create", "item": ask})
        await sock.send({"type": "response.create", "event_id": "ask"})
        first = envelopes(await sock.until(ended, ANSWER_TIMEOUT_S))
        kinds = [e["type"] for e in first]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
        [call] = [
            e["item"]
            for e in first
            if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
        ]
        assert call["name"] == "get_weather" and call["status"] == "completed"
        assert "paris" in json.loads(call["arguments"])["city"].lower()
        assert first[-1]["response"]["model"] == "antiphon-delegate"
        assert [e["sequence_number"] for e in first] == sorted(e["sequence_number"] for e in first)

        # The call answered; the delegate free to answer in words.
        update = {"type": "responses", "responses": {"tool_choice": "none"}}
        await sock.send(
            {"type": "session.update", "event_id": "u", "session": {"delegation": update}}
        )
        output = {"city": "Paris", "temperature_c": 18, "sky": "sunny"}
        result = {"type": "function_call_output", "call_id": call["call_id"]}
        await sock.send(
            {"type": "response.item.create", "item": result | {"output": json.dumps(output)}}
        )
        await sock.send({"type": "response.create", "event_id": "continue"})
        frames = await sock.until(ended, ANSWER_TIMEOUT_S)
        [updated] = [f for f in frames if f["type"] == "session.updated"]
        assert updated["session"]["delegation"]["responses"]["tool_choice"] == "none"
        second = envelopes(frames)[len(first) :]
        assert second[-1]["type"] == "response.completed", second[-1]
        text = "".join(e["delta"] for e in second if e["type"] == "response.output_text.delta")
        assert "18" in text or "sunny" in text.lower(), text
        # The voice says it: the words are forced into its text stream.
        await said_after(sock, len(sock.frames), text)
        assert not [f for f in sock.frames if f["type"] == "error"]


async def test_a_commentary_append_is_said_by_the_voice_and_told_when_taken(
    duplex_stack: LocalStack,
) -> None:
    async with live(duplex_stack.ports.gateway, {"model": "gpt-live-1"}) as sock:
        await sock.until(lambda f: f["type"] == "session.output_audio.delta", 10)
        content = "Hello Ada, the train leaves at nine."
        append = {"type": "session.commentary.append", "content": content, "event_id": "c1"}
        await sock.send(append)
        [*_, taken] = await sock.until(lambda f: f["type"] == "session.commentary.appended", 30)
        assert taken["client_event_id"] == "c1" and taken["start_ms"] == taken["end_ms"] > 0
        await said_after(sock, 0, content)


def spelled(text: str) -> list[str]:
    """`text` as the tiny random model's text stream holds it: with no
    tokenizer, stage0 spells each character as a token (`text_encoder`),
    and the model's frames spell each token out ("w5"); a word's tokens go
    in on consecutive frames, and the next word replaces the model's own."""
    encode = text_encoder(None, moshi_checkpoint.TINY_TEXT_CARD)
    return [f"w{token}" for word in text.split() for token in encode(word)]


async def said_after(sock: LiveSocket, start: int, text: str) -> None:
    """Until the output transcript from frame `start` on says `text`, token by token."""
    expected = spelled(text)

    def said() -> bool:
        deltas = (f["delta"] for f in sock.frames[start:] if f["type"] == TRANSCRIPT)
        heard = re.findall(r"w\d+", "".join(deltas))
        return any(heard[i : i + len(expected)] == expected for i in range(len(heard)))

    with contextlib.suppress(TimeoutError):
        await sock.until(lambda f: said(), 60)
    deltas = [f["delta"] for f in sock.frames[start:] if f["type"] == TRANSCRIPT]
    assert said(), (expected, "".join(deltas))
