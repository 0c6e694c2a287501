"""A stage1 worker's gRPC server on loopback, for the tests that talk to one
over a real channel: its sessions as a backend made them, the stub to it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from antiphon.common import grpcserver
from antiphon.common.binding import ActiveSessions
from antiphon.stage1.main import SERVICE_NAME
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.stage1.service import SessionFactory, Stage1Service
from antiphon.stage1.settings import Stage1Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc

RECV_TIMEOUT_S = 60.0


@contextlib.asynccontextmanager
async def serving(
    settings: Stage1Settings,
    sessions: SessionFactory,
    capabilities: cpb.Capabilities,
    stage_metrics: Stage1Metrics,
) -> AsyncIterator[stage_pb2_grpc.Stage1ServiceStub]:
    app = grpcserver.GrpcApp(SERVICE_NAME, "127.0.0.1:0")
    active = ActiveSessions(stage_metrics.sessions_active, capacity=settings.capacity)
    service = Stage1Service(
        sessions=sessions, capabilities=capabilities, settings=settings, active=active
    )
    stage_pb2_grpc.add_Stage1ServiceServicer_to_server(service, app.server)
    await app.start()
    try:
        async with grpcserver.channel(f"127.0.0.1:{app.port}") as channel:
            yield stage_pb2_grpc.Stage1ServiceStub(channel)
    finally:
        await app.server.stop(None)


async def answer(
    stub: stage_pb2_grpc.Stage1ServiceStub, session: str, text: str
) -> list[pb.AudioChunk]:
    """One response of `text` on a Bind stream of its own: its audio chunks."""
    call = stub.Bind()
    await call.write(pb.Stage1Request(open=pb.Stage1Open(session_id=session, sample_rate_hz=16000)))
    await call.write(pb.Stage1Request(text=pb.SynthesizeText(epoch=1, response_id="r", text=text)))
    await call.write(pb.Stage1Request(text=pb.SynthesizeText(epoch=1, response_id="r", final=True)))
    chunks: list[pb.AudioChunk] = []
    while True:
        event = await asyncio.wait_for(call.read(), RECV_TIMEOUT_S)
        assert isinstance(event, pb.Stage1Event), event
        kind = event.WhichOneof("kind")
        assert kind != "error", event.error
        if kind == "done":
            break
        chunks.append(event.audio)
    await call.done_writing()
    return chunks
