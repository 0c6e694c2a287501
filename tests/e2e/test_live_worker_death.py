"""A stage worker killed (SIGKILL) under a GPT-Live session: what its client sees.

The duplex model's stack (`duplex_stack`, tests/conftest.py) has a second
worker of each stage. A raw GPT-Live client talks in real time (200 ms every
200 ms: a question, then live silence) while the stage worker its session is
bound to is killed; it goes on talking, then closes. The session moves to the
other worker and the client is served on: its track never stops (as much
output as input), the model talks again, and the session ends as asked, with
`session.closed`. What the kill costs is said with typed events only: a
stage0 death takes the model's memory of the conversation with it, and the
client gets OpenAI's `error` event with `code: "model_context_reset"`; a
stage1 death (the voice, not the memory) costs only the audio that was in
that worker, and nothing is said. With no worker of the stage left, the
session stays open over a track of zeros and says so once, with a typed
`stage_unavailable`, until a worker comes back or the client closes.
Never a hang, never a bare close.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import websockets
from stack import LocalStack

from tests.support.live_models import violations
from tests.support.speech import spoken
from tests.support.stacks import bound_worker, respawn

pytestmark = [pytest.mark.stack, pytest.mark.models]

Frame = dict[str, Any]
CHUNK = 24000 // 5 * 2  # 200 ms of PCM16 at 24 kHz
BEFORE_S, AFTER_S = 2.0, 5.0  # talking before the kill, and after it


@dataclass
class Conversation:
    """A GPT-Live client's session: every frame it got, in order."""

    frames: list[Frame] = field(default_factory=list)
    session_id: str = ""
    sent_ms: int = 0
    killed_at: int = 0  # frames received before the kill

    def of(self, kind: str, since: int = 0) -> list[Frame]:
        return [f for f in self.frames[since:] if f["type"] == kind]

    def talk_after(self, since: int) -> bytes:
        deltas = self.of("session.output_audio.delta", since)
        return b"".join(base64.b64decode(f["delta"]) for f in deltas)


async def converse(
    stack: LocalStack, kill: Callable[[str], Awaitable[None]], seconds: float
) -> Conversation:
    """Talk in real time (a question, then live silence) for `seconds`, `kill`
    (given the session's id) `BEFORE_S` in; then `session.close`, until
    `session.closed`."""
    url = f"ws://127.0.0.1:{stack.ports.gateway}/v1/live/sessions"
    audio = spoken("Hello there, how are you doing today?", 24000, "piper")
    audio += bytes(max(0, int(seconds * 48000) - len(audio)))
    audio += bytes(-len(audio) % CHUNK)
    c = Conversation()
    headers = {"Authorization": "Bearer sk-unused"}
    async with websockets.connect(url, additional_headers=headers) as ws:

        async def read() -> None:
            async for raw in ws:
                c.frames.append(json.loads(raw))
                if c.frames[-1]["type"] == "session.closed":
                    return

        start = {"type": "session.start", "session": {"model": "gpt-live-1"}}
        await ws.send(json.dumps(start))
        c.frames.append(json.loads(await ws.recv()))
        assert c.frames[0]["type"] == "session.started", c.frames[0]
        c.session_id = c.frames[0]["session"]["id"]
        reader = asyncio.create_task(read())
        loop = asyncio.get_running_loop()
        tick = loop.time()
        for i in range(0, len(audio), CHUNK):
            if c.sent_ms == BEFORE_S * 1000:
                c.killed_at = len(c.frames)
                await kill(c.session_id)
            chunk = base64.b64encode(audio[i : i + CHUNK]).decode()
            await ws.send(json.dumps({"type": "session.input_audio.append", "audio": chunk}))
            c.sent_ms += 200
            tick += 0.2
            await asyncio.sleep(max(0.0, tick - loop.time()))
        await ws.send(json.dumps({"type": "session.close", "event_id": "evt_close"}))
        await asyncio.wait_for(reader, 10)
    assert [violations(f) for f in c.frames if violations(f)] == []
    # Whatever was lost, the track went on: as much output as input, and the
    # session ends as the client asked.
    assert len(c.of("session.output_audio.delta")) * 100 == c.sent_ms
    closed = c.frames[-1]
    assert (closed["type"], closed["reason"]) == ("session.closed", "close_requested"), closed
    assert closed["client_event_id"] == "evt_close"
    assert closed["usage"]["seconds"] == c.sent_ms // 1000
    return c


@pytest.mark.parametrize("stage", ["stage0", "stage1"])
async def test_kill_9_of_a_stage_worker_the_session_goes_on_and_says_what_it_lost(
    duplex_stack: LocalStack, spare_ports: dict[str, int], stage: str
) -> None:
    victims: list[str] = []

    async def kill(session_id: str) -> None:
        victims.append(await bound_worker(duplex_stack, session_id, stage))
        duplex_stack.kill(victims[0])

    try:
        c = await converse(duplex_stack, kill, BEFORE_S + AFTER_S)
        # Served by the other worker now, and the model talks again on the track.
        assert await bound_worker(duplex_stack, c.session_id, stage) != victims[0]
    finally:
        for name in victims:
            await asyncio.to_thread(respawn, duplex_stack, name, stage, spare_ports.get(name, 0))
    talk = np.frombuffer(c.talk_after(c.killed_at), dtype="<i2")
    assert np.count_nonzero(talk) > 0, "silent after the kill"
    errors = [(f["error"]["type"], f["error"]["code"]) for f in c.of("error")]
    if stage == "stage0":
        # The model's memory died with the worker: the client is told, once.
        assert errors == [("server_error", "model_context_reset")], errors
    else:
        assert errors == []


async def test_with_no_stage0_worker_left_the_client_is_told_and_can_close(
    duplex_stack: LocalStack, spare_ports: dict[str, int]
) -> None:
    """Both stage0 workers killed: the session has no model. It is not closed
    (a worker may come back, and the session binds it then); the client is
    told once, with a typed `stage_unavailable` (not at every retry, and no
    `model_context_reset`: no worker took the session), over a track of
    zeros, and its `session.close` is answered."""

    async def kill(session_id: str) -> None:
        duplex_stack.kill("stage0")
        duplex_stack.kill("stage0_b")

    try:
        c = await converse(duplex_stack, kill, BEFORE_S + AFTER_S + 2)
    finally:
        await asyncio.to_thread(respawn, duplex_stack, "stage0", "stage0")
        await asyncio.to_thread(
            respawn, duplex_stack, "stage0_b", "stage0", spare_ports["stage0_b"]
        )
    codes = [(f["error"]["type"], f["error"]["code"]) for f in c.of("error", c.killed_at)]
    assert codes == [("server_error", "stage_unavailable")], codes
