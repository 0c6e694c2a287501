"""A stage1 worker on the `mimi` backend, over a real gRPC server: describe,
bind, frames in, 80 ms chunks out, the response's end; a binding past the
batch's rows is refused before it takes one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from prometheus_client import CollectorRegistry

from antiphon.stage1 import backends
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.settings import Stage1Settings
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from tests.backends.kit import admission
from tests.stage1.serving import serving

CODEBOOKS = 8
RECV_TIMEOUT_S = 10.0


@dataclass
class Worker:
    stub: stage_pb2_grpc.Stage1ServiceStub
    failed: asyncio.Event


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    settings = Stage1Settings(backend="mimi", duplex_checkpoint="random:tiny", capacity=2)
    registry = CollectorRegistry()
    stage_metrics = Stage1Metrics(registry)
    failed = asyncio.Event()
    backend = backends.load("mimi")
    context = backends.BackendContext(settings, stage_metrics, registry, failed.set)
    async with (
        backend.open(context) as sessions,
        serving(settings, sessions, backend.capabilities, stage_metrics) as stub,
    ):
        yield Worker(stub, failed)


def frame(index: int, response_id: str = "", text: str = "") -> pb.Stage1Request:
    codes = [(index * 7 + k) % 32 for k in range(CODEBOOKS)]
    return pb.Stage1Request(
        frame=pb.DecodeFrame(epoch=1, response_id=response_id, codes=codes, text=text, index=index)
    )


async def read(call: grpc.aio.StreamStreamCall[pb.Stage1Request, pb.Stage1Event]) -> pb.Stage1Event:
    event = await asyncio.wait_for(call.read(), RECV_TIMEOUT_S)
    assert isinstance(event, pb.Stage1Event), event
    return event


@pytest.mark.models
async def test_a_bound_session_gets_its_response_frames_back_as_80_ms_chunks(
    worker: Worker,
) -> None:
    info = await worker.stub.Describe(pb.DescribeRequest(), timeout=5)
    assert info.backend == "mimi"
    assert info.capabilities.supports_audio_truncate
    assert info.capabilities.model_native
    assert info.capacity == 2

    call = worker.stub.Bind()
    await call.write(pb.Stage1Request(open=pb.Stage1Open(session_id="s1", sample_rate_hz=24000)))
    await call.write(frame(0))  # listening: decoded, not sent
    await call.write(frame(1, "r1", " Hello"))
    await call.write(frame(2, "r1", " there"))
    await call.write(
        pb.Stage1Request(text=pb.SynthesizeText(epoch=1, response_id="r1", final=True))
    )
    events = [await read(call) for _ in range(3)]
    assert [e.WhichOneof("kind") for e in events] == ["audio", "audio", "done"]
    for event, text in zip(events, [" Hello", " there"], strict=False):
        chunk = event.audio
        assert (chunk.response_id, chunk.text, chunk.duration_ms) == ("r1", text, 80)
        assert (chunk.sample_rate_hz, len(chunk.pcm16)) == (24000, 1920 * 2)
        assert [(m.text_chars, m.audio_end_ms) for m in chunk.marks] == [(len(text), 80)]
    assert events[2].done.response_id == "r1"
    await call.done_writing()
    assert await asyncio.wait_for(call.read(), RECV_TIMEOUT_S) == grpc.aio.EOF
    assert not worker.failed.is_set()


@pytest.mark.models
async def test_two_sessions_decode_side_by_side_and_a_third_is_refused(worker: Worker) -> None:
    calls = [worker.stub.Bind() for _ in range(2)]
    for i, call in enumerate(calls):
        await call.write(pb.Stage1Request(open=pb.Stage1Open(session_id=f"s{i}")))
        await call.initial_metadata()
    refused = await admission(worker.stub.Bind(), RECV_TIMEOUT_S)
    assert refused == grpc.StatusCode.RESOURCE_EXHAUSTED
    for index in range(3):
        for call in calls:
            await call.write(frame(index, "r"))
    for call in calls:
        chunks = [(await read(call)).audio for _ in range(3)]
        assert all(c.duration_ms == 80 and len(c.pcm16) == 1920 * 2 for c in chunks)
        await call.done_writing()
