"""GPT-Live (`/v1/live/sessions`) served by the duplex model, through the whole stack.

The stack is `duplex_stack` (tests/conftest.py): the Moshi architecture's
tiny random configuration, which talks and goes quiet by itself. The stock
`openai` SDK (`client.live.connect()`, in the clients venv: `make clients`)
holds a spoken exchange (tests/clients/drive_gpt_live.py): the question in
real time, 200 ms every 200 ms, then live silence, then `session.close`.
Hostile input is sent raw, as no SDK would send it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
from typing import Any

import numpy as np
import pytest
import websockets
from stack import LocalStack
from websockets.exceptions import ConnectionClosed

from tests.clients.harness import CLIENTS_PYTHON, HERE, Utterance, write_wav
from tests.support.live_models import violations

pytestmark = [pytest.mark.stack, pytest.mark.models]

QUESTION = Utterance("Hello there, how are you doing today?", "piper", frozenset())
Frame = dict[str, Any]


@pytest.fixture(scope="module")
def exchange(duplex_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Frame:
    """The SDK's exchange, run once: its record of every frame."""
    if not CLIENTS_PYTHON.exists():
        pytest.fail(f"{CLIENTS_PYTHON} is missing: run `make clients`", pytrace=False)
    tmp = tmp_path_factory.mktemp("gpt-live")
    out = tmp / "record.json"
    url = f"http://127.0.0.1:{duplex_stack.ports.gateway}/v1"
    wav = write_wav(tmp / "question.wav", QUESTION)
    args = ["--url", url, "--wav", str(wav), "--silence-s", "2", "--out", str(out)]
    proc = subprocess.run(
        [str(CLIENTS_PYTHON), str(HERE / "drive_gpt_live.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if not out.exists():
        pytest.fail(f"the driver wrote no record (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    record: Frame = json.loads(out.read_text())
    assert record["failure"] is None, record["failure"]
    return record


def of(frames: list[Frame], kind: str) -> list[Frame]:
    return [f for f in frames if f["type"] == kind]


def test_the_stock_sdk_starts_a_session_and_every_frame_is_valid(exchange: Frame) -> None:
    frames = exchange["frames"]
    assert exchange["refused"] == []
    started = frames[0]
    assert started["type"] == "session.started" and started["client_event_id"] == "evt_start"
    assert started["session"]["status"] == "active" and started["session"]["id"]
    assert started["session"]["expires_at"] > 0
    assert of(frames, "error") == []


def test_output_is_one_continuous_track_clocked_by_the_input(exchange: Frame) -> None:
    """As much output as input, in 100 ms deltas as the input came, the model's
    audio among the zeros."""
    frames = exchange["frames"]
    deltas = of(frames, "session.output_audio.delta")
    audio = [base64.b64decode(d["delta"]) for d in deltas]
    assert {len(a) for a in audio} == {4800}
    assert len(audio) * 100 == exchange["sent_ms"]
    # Released as the input came, not at the end: spread over the exchange.
    times = [d["received_s"] for d in deltas]
    assert times[len(times) // 2] - times[0] > exchange["sent_ms"] / 1000 / 3
    track = np.frombuffer(b"".join(audio), dtype="<i2")
    assert np.count_nonzero(track) > 0, "the model said nothing"
    assert np.count_nonzero(track) < len(track), "no silence between the model's words"


def test_transcript_deltas_span_the_model_s_audio_on_the_timeline(exchange: Frame) -> None:
    frames = exchange["frames"]
    spans = of(frames, "session.output_transcript.delta")
    assert spans, "the model spoke no word"
    track = np.frombuffer(
        b"".join(base64.b64decode(d["delta"]) for d in of(frames, "session.output_audio.delta")),
        dtype="<i2",
    )
    starts = [s["start_ms"] for s in spans]
    assert starts == sorted(starts)
    for s in spans:
        assert 0 <= s["start_ms"] < s["end_ms"] <= exchange["sent_ms"]
        # Each word's span is where its audio played.
        assert np.any(track[s["start_ms"] * 24 : s["end_ms"] * 24]), s


def test_close_is_answered_with_close_requested_and_the_usage(exchange: Frame) -> None:
    closed = exchange["frames"][-1]
    assert closed["type"] == "session.closed", closed["type"]
    assert (closed["reason"], closed["client_event_id"]) == ("close_requested", "evt_close")
    assert closed["usage"]["seconds"] == exchange["sent_ms"] // 1000
    assert closed["session"]["id"] == exchange["frames"][0]["session"]["id"]


async def test_hostile_input_gets_typed_errors(duplex_stack: LocalStack) -> None:
    url = f"ws://127.0.0.1:{duplex_stack.ports.gateway}/v1/live/sessions"
    headers = {"Authorization": "Bearer sk-unused"}
    got: list[Frame] = []

    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:

        async def ask(event: Frame) -> Frame:
            await ws.send(json.dumps(event))
            frame: Frame = json.loads(await ws.recv())
            got.append(frame)
            return frame

        def code(frame: Frame) -> tuple[str, str | None, str | None]:
            assert frame["type"] == "error", frame
            return frame["error"]["code"], frame["error"]["param"], frame.get("client_event_id")

        early = {"type": "session.input_audio.append", "audio": "AAAA", "event_id": "e1"}
        assert code(await ask(early)) == ("session_not_started", "type", "e1")
        start: Frame = {"type": "session.start", "session": {"model": "gpt-live-1"}}
        strange = {**start, "event_id": "e2", "session": {"model": "gpt-live-1", "modalities": []}}
        assert code(await ask(strange)) == ("unknown_parameter", "session.modalities", "e2")
        assert (await ask({**start, "event_id": "e3"}))["type"] == "session.started"
        oversize = base64.b64encode(bytes(15 * 1024 * 1024 + 2)).decode()
        huge = {"type": "session.input_audio.append", "audio": oversize, "event_id": "e4"}
        assert code(await ask(huge)) == ("audio_too_large", "audio", "e4")
        think = {"type": "session.thinking.append", "content": "hm", "delegation_id": "d1"}
        assert code(await ask({**think, "event_id": "e5"})) == (
            "delegation_not_found",
            "delegation_id",
            "e5",
        )
        assert code(await ask({"type": "response.create", "event_id": "e6"}))[0] == (
            "responses_delegation_required"
        )
        closed = await ask({"type": "session.close", "event_id": "e7"})
        assert (closed["type"], closed["reason"]) == ("session.closed", "close_requested")
    assert all(violations(f) == [] for f in got), [violations(f) for f in got]


async def test_the_output_stalls_when_the_input_stops_and_resumes_with_it(
    duplex_stack: LocalStack,
) -> None:
    """A second of audio buys a second of output; a silent client gets
    nothing more however long it waits, and its next audio buys more. Muted
    audio moves the clock as well (the model hears silence)."""
    url = f"ws://127.0.0.1:{duplex_stack.ports.gateway}/v1/live/sessions"
    second = base64.b64encode(bytes(48000)).decode()  # 1 s at 24 kHz
    append = {"type": "session.input_audio.append", "audio": second}
    got: list[Frame] = []
    async with websockets.connect(url) as ws:

        async def read_for(seconds: float) -> list[Frame]:
            frames: list[Frame] = []
            with contextlib.suppress(TimeoutError, ConnectionClosed):
                async with asyncio.timeout(seconds):
                    while True:
                        frames.append(json.loads(await ws.recv()))
            got.extend(frames)
            return frames

        await ws.send(json.dumps({"type": "session.start", "session": {"model": "gpt-live-1"}}))
        await ws.send(json.dumps(append))
        first = await read_for(2.0)
        assert first[0]["type"] == "session.started"
        assert len(of(first, "session.output_audio.delta")) == 10
        assert of(await read_for(1.5), "session.output_audio.delta") == []  # stalled
        await ws.send(json.dumps({"type": "session.input_audio.mute", "event_id": "m"}))
        await ws.send(json.dumps(append))
        resumed = await read_for(1.0)
        assert resumed[0]["type"] == "session.input_audio.muted"
        assert len(of(resumed, "session.output_audio.delta")) == 10
        await ws.send(json.dumps({"type": "session.close"}))
        [closed] = of(await read_for(5.0), "session.closed")
        assert closed["usage"]["seconds"] == 2.0
    assert all(violations(f) == [] for f in got)


@pytest.mark.parametrize(
    ("fmt", "silence", "bytes_per_s"),
    [
        ({"type": "audio/pcmu", "rate": 8000}, b"\xff" * 8000, 8000),
        ({"type": "audio/pcm", "rate": 16000}, bytes(32000), 32000),
    ],
    ids=["g711-ulaw", "pcm-16k"],
)
async def test_the_track_is_in_the_start_s_format_both_ways(
    duplex_stack: LocalStack, fmt: Frame, silence: bytes, bytes_per_s: int
) -> None:
    """The session hears the client's format and speaks the track's PCM; the
    gateway gives the track back in the client's format, a second for a second."""
    url = f"ws://127.0.0.1:{duplex_stack.ports.gateway}/v1/live/sessions"
    start = {"type": "session.start", "session": {"model": "m", "audio": {"format": fmt}}}
    append = {"type": "session.input_audio.append", "audio": base64.b64encode(silence).decode()}
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps(start))
        started = json.loads(await ws.recv())
        assert started["type"] == "session.started", started
        assert started["session"]["audio"]["format"] == fmt
        await ws.send(json.dumps(append))
        deltas = [json.loads(await ws.recv()) for _ in range(10)]
    audio = b"".join(base64.b64decode(d["delta"]) for d in deltas)
    assert {d["type"] for d in deltas} == {"session.output_audio.delta"}
    # A second of output, less the resampler's few ms of delay.
    assert bytes_per_s * 0.97 <= len(audio) <= bytes_per_s
