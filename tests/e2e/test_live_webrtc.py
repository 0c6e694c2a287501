"""GPT-Live over WebRTC (`POST /v1/live/sessions`) and its sideband
(`/v1/live/sessions/{id}/attach`), through the whole stack.

The stack is `duplex_stack` (tests/e2e/conftest.py): the Moshi architecture's
tiny random configuration. The stock `openai` SDK places the call
(`client.live.create` with an aiortc offer; the caller is bench/lib/webrtc.py's)
and attaches a sideband (`client.live.sideband.connect`); the caller's
microphone streams a spoken question in real time (200 ms every 200 ms) and
hears the continuous output track; headless Chromium does the same POST by
`fetch` with a fake microphone. Hostile bodies are posted raw.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from openai import AsyncOpenAI
from openai.types.live.connect_server_event import ConnectServerEvent
from openai.types.live.media_session_config_param import MediaSessionConfigParam
from pydantic import TypeAdapter
from stack import LocalStack
from websockets.exceptions import ConnectionClosed

from antiphon.gateway.calls.call_audio import Speaker
from bench.lib.webrtc import Caller
from tests.e2e.test_browser import QUESTION, chromium, fake_microphone
from tests.support import auth
from tests.support.live_models import violations
from tests.support.openai_models import judged, models_of
from tests.support.speech import spoken

pytestmark = [pytest.mark.stack, pytest.mark.models]

Frame = dict[str, Any]
SESSION: MediaSessionConfigParam = {"model": "gpt-live-1"}
_SIDEBAND_MODELS = models_of(ConnectServerEvent)
_SIDEBAND: TypeAdapter[Any] = TypeAdapter(ConnectServerEvent)


def sideband_violations(frame: Frame) -> list[str]:
    """What a strict sideband client (the SDK's `ConnectServerEvent`) refuses."""
    return judged(frame, _SIDEBAND_MODELS, _SIDEBAND, "GPT-Live sideband", "ConnectServerEvent")


def of(frames: list[Frame], kind: str) -> list[Frame]:
    return [f for f in frames if f["type"] == kind]


def sdk(stack: LocalStack, key: str = "sk-unused") -> AsyncOpenAI:
    base = f"http://127.0.0.1:{stack.ports.gateway}/v1"
    return AsyncOpenAI(api_key=key, base_url=base, websocket_base_url=base.replace("http", "ws"))


async def dial(client: AsyncOpenAI, session: MediaSessionConfigParam) -> tuple[Caller, str]:
    """An aiortc caller whose offer the SDK posts: the caller, and the session id."""
    peer = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    microphone = Speaker()
    peer.addTrack(microphone)
    caller = Caller(peer, microphone)
    await peer.setLocalDescription(await peer.createOffer())
    try:
        created = await client.live.create(
            session=session, transport={"type": "webrtc", "sdp": peer.localDescription.sdp}
        )
    except BaseException:
        await peer.close()
        raise
    assert created.transport.type == "webrtc"
    await peer.setRemoteDescription(RTCSessionDescription(created.transport.sdp, "answer"))
    await asyncio.wait_for(caller.opened.wait(), 30)
    return caller, created.session.id


async def wait_for(frames: list[Frame], kind: str, timeout: float = 20.0) -> Frame:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = of(frames, kind)
        if found:
            return found[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {kind} in {[f['type'] for f in frames]}")


def clean(frame: Frame) -> Frame:
    return {k: v for k, v in frame.items() if k != "_at"}


@pytest.fixture(scope="module")
async def call(duplex_stack: LocalStack) -> Frame:
    """One WebRTC session, run once: the caller speaks a question in real
    time (200 ms every 200 ms, then live silence) with a sideband attached,
    which mutes the input, tries a second start and is refused, and sees the
    caller's `session.close` end it."""
    client = sdk(duplex_stack)
    question = spoken("Hello there, how are you doing today?", 24000, "piper")
    caller, session_id = await dial(client, SESSION)
    piece = 24000 // 5 * 2
    try:
        async with client.live.sideband.connect(session_id=session_id) as conn:
            side: list[Frame] = []

            async def read() -> None:
                with contextlib.suppress(ConnectionClosed):
                    while True:
                        raw = await conn.recv_bytes()
                        conn.parse_event(raw)
                        side.append({**json.loads(raw), "_at": time.monotonic()})

            reader = asyncio.create_task(read())
            spoke_at = time.monotonic()
            for i in range(0, len(question) + 2 * 24000 * 2, piece):
                caller.say(question[i : i + piece] or bytes(piece), 24000)
                await asyncio.sleep(0.2)
            await conn.send({"type": "session.input_audio.mute", "event_id": "sb_mute"})
            await conn.send({"type": "session.start", "event_id": "sb_start", "session": SESSION})  # type: ignore[arg-type]
            await wait_for(caller.events, "session.input_audio.muted")
            await asyncio.sleep(0.5)
            caller.send({"type": "session.close", "event_id": "evt_close"})
            closed = await wait_for(caller.events, "session.closed")
            await asyncio.wait_for(reader, 15)
        ended = await caller.ended_by_server()
    finally:
        await caller.hang_up()
        await client.close()
    return {
        "session_id": session_id,
        "channel": caller.events,
        "sideband": side,
        "heard": caller.heard,
        "spoke_at": spoke_at,
        "closed": closed,
        "ended": ended,
        "question": question,
    }


def test_the_sdk_s_post_answers_with_the_session_id_and_the_channel_starts_with_it(
    call: Frame,
) -> None:
    channel = call["channel"]
    started = channel[0]
    assert started["type"] == "session.started", [f["type"] for f in channel]
    assert started["session"]["id"] == call["session_id"]
    assert started["session"]["audio"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert of(channel, "error") == []
    assert all(violations(clean(f)) == [] for f in channel), [violations(clean(f)) for f in channel]


def test_the_output_is_the_call_s_track_never_deltas_on_the_channel(call: Frame) -> None:
    """The timeline's continuous track plays on the call: it arrives all the
    while the caller speaks, with the model's audio in it."""
    assert of(call["channel"], "session.output_audio.delta") == []
    heard = call["heard"]
    times = [t for t, _ in heard.frames]
    assert times and times[-1] - times[0] > 3.0
    assert heard.rms_between(call["spoke_at"], times[-1]) > 0, "the track was silent"
    assert of(call["channel"], "session.output_transcript.delta"), "the model spoke no word"


def test_the_sideband_sees_every_channel_event_the_input_and_the_spanned_track(
    call: Frame,
) -> None:
    channel, side = call["channel"], call["sideband"]
    assert all(sideband_violations(clean(f)) == [] for f in side), [
        sideband_violations(clean(f)) for f in side
    ]
    # What the channel got once the sideband was on (all but the start), the sideband got.
    ids = {f.get("event_id") for f in side}
    later = [f for f in channel[1:] if f["_at"] > side[0]["_at"] + 0.5]
    assert later and [f["type"] for f in later if f["event_id"] not in ids] == []
    assert of(side, "session.closed")[0]["event_id"] == call["closed"]["event_id"]
    # The input, reflected before the mute: the caller's question, loud.
    reflected = np.frombuffer(
        b"".join(base64.b64decode(f["audio"]) for f in of(side, "session.input_audio.append")),
        dtype="<i2",
    )
    assert len(reflected) >= len(call["question"]) // 2
    assert np.abs(reflected.astype(np.int32)).max() > 3000, "the question was not reflected"
    # The output, spanned on the timeline: contiguous 100 ms PCM16 24 kHz pieces.
    deltas = of(side, "session.output_audio.delta")
    assert deltas
    for before, after in itertools.pairwise(deltas):
        assert after["start_ms"] == before["end_ms"]
    for d in deltas:
        assert d["end_ms"] - d["start_ms"] == 100 and len(base64.b64decode(d["delta"])) == 4800
    assert deltas[-1]["end_ms"] <= len(reflected) * 1000 // 24000 + deltas[0]["start_ms"] + 100


def test_a_sideband_drives_the_session_but_never_starts_it(call: Frame) -> None:
    muted = of(call["channel"], "session.input_audio.muted")
    assert [m["client_event_id"] for m in muted] == ["sb_mute"]
    [refused] = of(call["sideband"], "error")
    assert refused["error"]["code"] == "session_already_started"
    assert refused["client_event_id"] == "sb_start"
    assert "error" not in {f["type"] for f in call["channel"]}  # the channel never saw it


def test_close_on_the_channel_ends_the_call_and_the_sideband(call: Frame) -> None:
    closed = call["closed"]
    assert (closed["reason"], closed["client_event_id"]) == ("close_requested", "evt_close")
    assert closed["session"]["id"] == call["session_id"]
    assert call["ended"], "the call outlived its session"
    assert call["sideband"][-1]["type"] == "session.closed"


def _post(stack: LocalStack, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    url = f"http://127.0.0.1:{stack.ports.gateway}/v1/live/sessions"
    with httpx.Client(timeout=30) as http:
        return http.post(
            url, content=body, headers={"content-type": "application/json", **(headers or {})}
        )


OFFER = "v=0\r\n"  # refused before anything reads it, where the body is refused first


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (b"{nope", "invalid_json", None),
        (b"[]", "invalid_value", "body"),
        (
            json.dumps(
                {
                    "session": SESSION,
                    "transport": {"type": "webrtc", "sdp": OFFER},
                    "modalities": [],
                }
            ),
            "unknown_parameter",
            "modalities",
        ),
        (
            json.dumps({"session": SESSION, "transport": {"type": "webrtc"}}),
            "missing_required_parameter",
            "transport.sdp",
        ),
        (json.dumps({"session": SESSION}), "missing_required_parameter", "transport"),
        (
            json.dumps({"session": SESSION, "transport": {"type": "websocket", "sdp": OFFER}}),
            "invalid_value",
            "transport.type",
        ),
        (
            json.dumps(
                {
                    "session": {**SESSION, "voice": "alloy"},
                    "transport": {"type": "webrtc", "sdp": OFFER},
                }
            ),
            "unknown_parameter",
            "session.voice",
        ),
        (
            json.dumps(
                {
                    "session": {"model": "m", "client": {"data_channel": {}}},
                    "transport": {"type": "webrtc", "sdp": OFFER},
                }
            ),
            "unsupported_capability",
            "session.client",
        ),
        (
            json.dumps({"session": SESSION, "transport": {"type": "webrtc", "sdp": "hello"}}),
            "invalid_offer",
            "transport.sdp",
        ),
    ],
    ids=[
        "bad-json",
        "not-an-object",
        "unknown-field",
        "missing-sdp",
        "no-transport",
        "not-webrtc",
        "unknown-session-field",
        "client-permissions",
        "not-sdp",
    ],
)
def test_hostile_bodies_get_typed_errors(
    duplex_stack: LocalStack, body: bytes | str, code: str, param: str | None
) -> None:
    reply = _post(duplex_stack, body.encode() if isinstance(body, str) else body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
    assert set(error) == {"type", "code", "message", "param"}


async def test_the_sdk_raises_a_refused_offer_and_a_sideband_of_no_session_is_an_error(
    duplex_stack: LocalStack,
) -> None:
    client = sdk(duplex_stack)
    try:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.live.create(
                session=SESSION, transport={"type": "webrtc", "sdp": "v=0\r\nnonsense"}
            )
        assert refused.value.code == "invalid_offer"
        async with client.live.sideband.connect(session_id="sess_nobody") as conn:
            frame = json.loads(await asyncio.wait_for(conn.recv_bytes(), 10))
            assert (frame["type"], frame["error"]["code"]) == ("error", "session_not_found")
            assert sideband_violations(frame) == []
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(conn.recv_bytes(), 10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    finally:
        await client.close()


def test_the_post_authenticates_as_the_websocket_route(auth_stack: LocalStack) -> None:
    body = json.dumps(
        {"session": SESSION, "transport": {"type": "webrtc", "sdp": "hello"}}
    ).encode()
    missing = _post(auth_stack, body)
    assert (missing.status_code, missing.json()["error"]["code"]) == (401, "missing_api_key")
    wrong = _post(auth_stack, body, {"authorization": "Bearer sk-wrong"})
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (401, "invalid_api_key")
    # With the key, the body is judged: the credential comes first.
    keyed = _post(auth_stack, body, {"authorization": f"Bearer {auth.SINGLE_KEY}"})
    assert (keyed.status_code, keyed.json()["error"]["code"]) == (400, "invalid_offer")


# The page's side of a browser's GPT-Live session: microphone, offer, POST by
# fetch, answer; the data channel's events kept in `window.live`.
BROWSER_CALL = """
const done = arguments[arguments.length - 1];
(async () => {
  const log = window.live = { events: [], errors: [] };
  try {
    const mic = await navigator.mediaDevices.getUserMedia({ audio: true });
    const pc = window.livePc = new RTCPeerConnection();
    mic.getTracks().forEach((t) => pc.addTrack(t, mic));
    const dc = window.liveDc = pc.createDataChannel("oai-events");
    dc.onmessage = (m) => log.events.push(JSON.parse(m.data));
    pc.ontrack = (e) => {
      const speaker = new Audio();
      speaker.srcObject = e.streams[0] || new MediaStream([e.track]);
      speaker.play().catch(() => {});
    };
    await pc.setLocalDescription(await pc.createOffer());
    const reply = await fetch("/v1/live/sessions", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "Bearer sk-browser" },
      body: JSON.stringify({
        session: { model: "gpt-live-1" },
        transport: { type: "webrtc", sdp: pc.localDescription.sdp },
      }),
    });
    const body = await reply.json();
    if (!reply.ok) throw new Error(JSON.stringify(body));
    await pc.setRemoteDescription({ type: "answer", sdp: body.transport.sdp });
    done(body.session.id);
  } catch (err) {
    log.errors.push(String(err));
    done(null);
  }
})();
"""
ENERGY = """
const done = arguments[arguments.length - 1];
window.livePc.getStats().then((stats) => {
  let energy = 0;
  stats.forEach((r) => {
    if (r.type === "inbound-rtp" && r.kind === "audio") energy += r.totalAudioEnergy || 0;
  });
  done(energy);
});
"""


async def test_chromium_posts_by_fetch_and_a_sideband_hears_its_microphone(
    duplex_stack: LocalStack, tmp_path: Path
) -> None:
    """Headless Chromium with a fake microphone (the question after 2.5 s of
    silence) places the session by `fetch`; the SDK's sideband on its id
    hears the question reflected, and the page hears the track."""
    gateway = f"http://127.0.0.1:{duplex_stack.ports.gateway}"
    mic = fake_microphone(tmp_path / "mic.wav", "piper", [(2500, QUESTION)])
    client = sdk(duplex_stack)
    with chromium(mic, tmp_path / "profile") as driver:
        try:
            await asyncio.to_thread(driver.get, f"{gateway}/healthz")
            session_id = await asyncio.to_thread(driver.execute_async_script, BROWSER_CALL)
            page: Frame = await asyncio.to_thread(driver.execute_script, "return window.live")
            assert session_id and not page["errors"], page
            side: list[Frame] = []
            async with client.live.sideband.connect(session_id=session_id) as conn:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(6.0):
                        while True:
                            side.append(json.loads(await conn.recv_bytes()))
                await asyncio.to_thread(
                    driver.execute_script,
                    "window.liveDc.send(JSON.stringify({type: 'session.close'}))",
                )
                with contextlib.suppress(ConnectionClosed, TimeoutError):
                    async with asyncio.timeout(15):
                        while True:
                            side.append(json.loads(await conn.recv_bytes()))
            energy = await asyncio.to_thread(driver.execute_async_script, ENERGY)
            page = await asyncio.to_thread(driver.execute_script, "return window.live")
        finally:
            await client.close()
    events = page["events"]
    assert events[0]["type"] == "session.started" and events[0]["session"]["id"] == session_id
    assert of(events, "error") == [] and of(events, "session.output_audio.delta") == []
    assert events[-1]["type"] == "session.closed", [e["type"] for e in events]
    reflected = np.frombuffer(
        b"".join(base64.b64decode(f["audio"]) for f in of(side, "session.input_audio.append")),
        dtype="<i2",
    )
    assert len(reflected) > 24000 * 5, "the microphone's audio was not reflected"
    assert np.abs(reflected.astype(np.int32)).max() > 1000, "the question was not heard"
    assert of(side, "session.output_audio.delta") and side[-1]["type"] == "session.closed"
    assert energy > 0, "the page heard no track"
    assert all(sideband_violations(f) == [] for f in side)
