"""A stage1 worker on the `nemotron` backend, over a real gRPC server:
describe, bind, frames of text tokens in, 80 ms chunks out at each
session's rate, the response's end; a frame without a valid token is
refused, typed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage1 import backends
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.settings import Stage1Settings
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from tests.stage1.serving import serving

RECV_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
async def stub() -> AsyncIterator[stage_pb2_grpc.Stage1ServiceStub]:
    settings = Stage1Settings(backend="nemotron", duplex_checkpoint="random:tiny", capacity=2)
    registry = CollectorRegistry()
    stage_metrics = Stage1Metrics(registry)
    failed = asyncio.Event()
    backend = backends.load("nemotron")
    context = backends.BackendContext(settings, stage_metrics, registry, failed.set)
    async with (
        backend.open(context) as sessions,
        serving(settings, sessions, backend.capabilities, stage_metrics) as stub,
    ):
        yield stub
    assert not failed.is_set()


def frame(index: int, tokens: list[int], response_id: str = "", text: str = "") -> pb.Stage1Request:
    return pb.Stage1Request(
        frame=pb.DecodeFrame(
            epoch=1, response_id=response_id, tokens=tokens, text=text, index=index
        )
    )


async def read(call: grpc.aio.StreamStreamCall[pb.Stage1Request, pb.Stage1Event]) -> pb.Stage1Event:
    event = await asyncio.wait_for(call.read(), RECV_TIMEOUT_S)
    assert isinstance(event, pb.Stage1Event), event
    return event


async def speak(
    call: grpc.aio.StreamStreamCall[pb.Stage1Request, pb.Stage1Event], rate: int
) -> list[pb.Stage1Event]:
    """A session at `rate`: a listening frame, then a response of three."""
    await call.write(
        pb.Stage1Request(open=pb.Stage1Open(session_id=f"s{rate}", sample_rate_hz=rate))
    )
    await call.write(frame(0, [0]))  # listening: spoken, not sent
    for index, (token, text) in enumerate([(1, ""), (40, " Hello"), (77, " there")], start=1):
        await call.write(frame(index, [token], "r1", text))
    await call.write(
        pb.Stage1Request(text=pb.SynthesizeText(epoch=1, response_id="r1", final=True))
    )
    events = [await read(call) for _ in range(4)]
    await call.done_writing()
    assert await asyncio.wait_for(call.read(), RECV_TIMEOUT_S) == grpc.aio.EOF
    return events


@pytest.mark.models
async def test_it_describes_a_model_native_backend_without_audio_truncation(
    stub: stage_pb2_grpc.Stage1ServiceStub,
) -> None:
    info = await stub.Describe(pb.DescribeRequest(), timeout=5)
    assert (info.backend, info.capacity) == ("nemotron", 2)
    assert info.capabilities.model_native
    assert not info.capabilities.supports_audio_truncate


@pytest.mark.models
async def test_two_sessions_at_16_and_24_khz_get_their_response_as_80_ms_chunks(
    stub: stage_pb2_grpc.Stage1ServiceStub,
) -> None:
    rates = (16000, 24000)
    heard = await asyncio.gather(*(speak(stub.Bind(), rate) for rate in rates))
    for rate, events in zip(rates, heard, strict=True):
        assert [e.WhichOneof("kind") for e in events] == ["audio"] * 3 + ["done"]
        for event, text in zip(events, ["", " Hello", " there"], strict=False):
            chunk = event.audio
            assert (chunk.response_id, chunk.text, chunk.duration_ms) == ("r1", text, 80)
            assert (chunk.sample_rate_hz, len(chunk.pcm16)) == (rate, rate * 80 // 1000 * 2)
            assert not chunk.marks  # no truncation declared, no marks claimed
        assert events[3].done.response_id == "r1"
        speech = np.frombuffer(b"".join(e.audio.pcm16 for e in events[:3]), np.int16)
        assert np.abs(speech).max() > 0


@pytest.mark.models
async def test_a_frame_without_one_known_token_is_refused_typed(
    stub: stage_pb2_grpc.Stage1ServiceStub,
) -> None:
    call = stub.Bind()
    await call.write(pb.Stage1Request(open=pb.Stage1Open(session_id="bad", sample_rate_hz=16000)))
    await call.write(frame(0, []))
    await call.write(frame(1, [1 << 20]))
    for _ in range(2):
        error = (await read(call)).error
        assert error.code == "invalid_frame", error
        assert "tokens" in error.message
    await call.done_writing()
    assert await asyncio.wait_for(call.read(), RECV_TIMEOUT_S) == grpc.aio.EOF
