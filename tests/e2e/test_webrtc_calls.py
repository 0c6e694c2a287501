"""WebRTC calls (`POST /v1/realtime/calls`) through the serving path, with a
Python caller on aiortc (tests/support/webrtc.py): the answer SDP and the
call's id, OpenAI's events on `oai-events`, the answer's audio on the call's
track (never as deltas on the channel), hangup, and the refusals."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import websockets
from stack import LocalStack

from bench.lib.webrtc import Caller, CallRefused
from tests.support import auth
from tests.support.live import QUESTIONS, STORY, words
from tests.support.speech import Voice, spoken

pytestmark = pytest.mark.stack


def _base(stack: LocalStack) -> str:
    return f"http://127.0.0.1:{stack.ports.gateway}"


async def test_a_call_answers_with_audio_on_its_track_and_events_on_its_channel(
    synthetic_stack: LocalStack,
) -> None:
    caller = await Caller.dial(_base(synthetic_stack))
    try:
        created = await caller.wait_for("session.created")
        assert created["session"]["type"] == "realtime"
        asked = time.monotonic()
        caller.send({"type": "response.create"})
        done = await caller.wait_for("response.done")
        assert done["response"]["status"] == "completed", done
        started = await caller.wait_for("output_audio_buffer.started")
        assert started["response_id"] == done["response"]["id"]
        stopped = await caller.wait_for("output_audio_buffer.stopped", timeout=30)
        assert stopped["response_id"] == done["response"]["id"]
        # What was said arrived as sound, from the start of playback on.
        assert caller.heard.loud_after(asked) is not None
        assert caller.heard.rms_between(started["_at"], stopped["_at"]) > 100
    finally:
        await caller.hang_up()
    types = [e["type"] for e in caller.events]
    assert "response.output_audio.delta" not in types  # the track carries it
    assert "response.output_audio_transcript.delta" in types


async def test_a_call_whose_offer_has_no_candidates_connects(synthetic_stack: LocalStack) -> None:
    """Browsers' SDKs post the offer before gathering (no `a=candidate`): the
    gateway learns the caller's address from its checks (peer-reflexive)."""
    caller = await Caller.dial(_base(synthetic_stack), candidates=False)
    try:
        await caller.wait_for("session.created")
        started = await caller.answer_played()
        assert caller.heard.loud_after(started["_at"] - 0.5) is not None
    finally:
        await caller.hang_up()


async def test_a_call_is_hung_up_by_its_id(synthetic_stack: LocalStack) -> None:
    caller = await Caller.dial(_base(synthetic_stack))
    try:
        await caller.wait_for("session.created")
        async with httpx.AsyncClient() as http:
            url = f"{_base(synthetic_stack)}/v1/realtime/calls/{caller.call_id}/hangup"
            assert (await http.post(url)).status_code == 200
            missing = await http.post(f"{_base(synthetic_stack)}/v1/realtime/calls/rtc_x/hangup")
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "call_not_found"
        # The call ends on the server: its data channel closes under the caller.
        assert await caller.ended_by_server()
    finally:
        await caller.hang_up()


async def test_a_server_socket_attached_by_call_id_sees_and_drives_the_call(
    synthetic_stack: LocalStack,
) -> None:
    """`/v1/realtime?call_id=`: the server's WebSocket gets the call's events
    and what it sends is the call's (the caller sees the answer it asked for)."""
    caller = await Caller.dial(_base(synthetic_stack))
    ws_url = f"ws://127.0.0.1:{synthetic_stack.ports.gateway}/v1/realtime"
    try:
        await caller.wait_for("session.created")
        async with websockets.connect(f"{ws_url}?call_id={caller.call_id}") as server:
            await server.send(json.dumps({"type": "response.create"}))
            seen: list[str] = []
            while "response.done" not in seen:
                seen.append(json.loads(await asyncio.wait_for(server.recv(), 30))["type"])
            assert "response.output_audio.delta" not in seen
        done = await caller.wait_for("response.done")
        assert done["response"]["status"] == "completed"
        with pytest.raises(websockets.InvalidStatus) as refused:
            await websockets.connect(f"{ws_url}?call_id=rtc_nobody")
        assert refused.value.response.status_code == 404
    finally:
        await caller.hang_up()


async def test_a_call_whose_caller_stops_sending_audio_is_ended(
    synthetic_stack: LocalStack,
) -> None:
    """`call_media_timeout_s` (3 s on this stack): the caller's track ends,
    no audio comes, and the gateway ends the call."""
    caller = await Caller.dial(_base(synthetic_stack))
    try:
        await caller.wait_for("session.created")
        caller.microphone.stop()
        assert await caller.ended_by_server()
    finally:
        await caller.hang_up()


async def test_calls_past_the_gateways_bound_are_refused(synthetic_stack: LocalStack) -> None:
    """`max_calls` (2 on this stack): a third call is refused with 429
    `call_limit`, and a place that frees up is a call again."""
    first = await Caller.dial(_base(synthetic_stack))
    second = await Caller.dial(_base(synthetic_stack))
    try:
        with pytest.raises(CallRefused) as refused:
            await Caller.dial(_base(synthetic_stack))
        assert refused.value.status == 429
        assert refused.value.body["error"]["code"] == "call_limit"
        await first.hang_up()
        for _ in range(50):  # the gateway lets go of the call as its peer closes
            try:
                third = await Caller.dial(_base(synthetic_stack))
            except CallRefused:
                await asyncio.sleep(0.2)
                continue
            await third.wait_for("session.created")
            await third.hang_up()
            break
        else:
            raise AssertionError("the freed place was never given to a new call")
    finally:
        await first.hang_up()
        await second.hang_up()


async def test_an_offer_that_is_no_sdp_is_refused(synthetic_stack: LocalStack) -> None:
    async with httpx.AsyncClient() as http:
        reply = await http.post(
            f"{_base(synthetic_stack)}/v1/realtime/calls",
            content=b"hello",
            headers={"content-type": "application/sdp"},
        )
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "invalid_offer"


async def test_a_call_needs_a_credential_where_the_gateway_asks_for_one(
    auth_stack: LocalStack,
) -> None:
    with pytest.raises(CallRefused) as refused:
        await Caller.dial(_base(auth_stack))
    assert refused.value.status == 401
    caller = await Caller.dial(_base(auth_stack), bearer=auth.SINGLE_KEY)
    try:
        await caller.wait_for("session.created")
    finally:
        await caller.hang_up()


@pytest.mark.models
@pytest.mark.parametrize(("voice", "rate"), [("piper", 24000), ("espeak", 16000)])
async def test_a_caller_is_heard_and_answered_aloud(
    model_stack: LocalStack, voice: Voice, rate: int
) -> None:
    """A spoken question into the call's microphone, in real time, with
    OpenAI's default turn detection: heard, and answered on the track."""
    question = QUESTIONS[voice]
    caller = await Caller.dial(_base(model_stack), session={"type": "realtime"})
    try:
        await caller.wait_for("session.created")
        await asyncio.sleep(0.6)  # the microphone is live before the user speaks
        caller.say(spoken(question.text, rate, voice), rate)
        heard = await caller.wait_for(
            "conversation.item.input_audio_transcription.completed", timeout=120
        )
        assert question.words <= words(heard["transcript"]), heard["transcript"]
        started = await caller.wait_for("output_audio_buffer.started", timeout=120)
        done = await caller.wait_for("response.done", timeout=180)
        assert done["response"]["status"] == "completed", done
        await caller.wait_for("output_audio_buffer.stopped", timeout=120)
    finally:
        await caller.hang_up()
    assert caller.heard.rms_between(started["_at"], started["_at"] + 1.0) > 300
    assert not caller.of_type("error"), caller.of_type("error")


@pytest.mark.models
async def test_a_caller_talks_over_the_answer_and_it_stops(model_stack: LocalStack) -> None:
    caller = await Caller.dial(_base(model_stack))
    try:
        await caller.wait_for("session.created")
        await asyncio.sleep(0.6)
        # "Tell me about the history of Paris" once got a two-second answer on
        # CI, over before the caller cut in.
        caller.say(spoken(STORY, 24000, "espeak"), 24000)
        started = await caller.wait_for("output_audio_buffer.started", timeout=120)
        await asyncio.sleep(0.8)  # the answer is playing
        mark = len(caller.events)
        caller.say(spoken("Stop. What is two plus two?", 24000, "piper"), 24000)
        cleared = await caller.wait_for("output_audio_buffer.cleared", after=mark, timeout=30)
        assert cleared["response_id"] == started["response_id"]
        first = [
            e
            for e in caller.of_type("response.done")
            if e["response"]["id"] == started["response_id"]
        ]
        if not first:
            first = [await caller.wait_for("response.done", after=mark, timeout=30)]
        assert first[0]["response"]["status"] == "cancelled", first[0]
        # The answer went quiet at once: the caller is speaking meanwhile.
        quiet_from = cleared["_at"] + 0.2
        assert caller.heard.rms_between(quiet_from, quiet_from + 0.6) < 100
        # And the answer's item keeps only what was played before the cut.
        truncated = await caller.wait_for("conversation.item.truncated", after=mark, timeout=30)
        played_s = cleared["_at"] - started["_at"]
        assert 0 < truncated["audio_end_ms"] <= (played_s + 0.3) * 1000, (truncated, played_s)
    finally:
        await caller.hang_up()
