"""A stage0 worker with the `moshi` backend over real gRPC: it describes itself
as model-native duplex, and a bound session that streams audio gets a model
frame per 80 ms step with a code per codebook and its index counting up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import CollectorRegistry

from antiphon.common.binding import ActiveSessions
from antiphon.stage0.backends.moshi.engines import DuplexEngines
from antiphon.stage0.backends.moshi.kv_cache import Fp8CacheAttention
from antiphon.stage0.main import load_engines
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.service import Stage0Service
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from tests.stage0.duplex_reference import voice

pytestmark = pytest.mark.models

FRAMES = 12


@pytest.fixture(params=["model", "fp8"])
async def worker(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[str, CollectorRegistry]]:
    # The KV cache format as a deployment sets it, from the environment.
    monkeypatch.setenv("ANTIPHON_DUPLEX_KV_CACHE", request.param)
    settings = Stage0Settings(
        backend="moshi", duplex_checkpoint="random:tiny", duplex_seed=0, capacity=2
    )
    assert settings.duplex_kv_cache == request.param
    registry = CollectorRegistry()
    metrics = Stage0Metrics(registry)
    active = ActiveSessions(metrics.sessions_active, capacity=settings.capacity)
    service = Stage0Service(settings=settings, metrics=metrics, active=active)
    server = grpc.aio.server()
    stage_pb2_grpc.add_Stage0ServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    models = await load_engines(settings, metrics)
    service.models = models
    assert isinstance(models, DuplexEngines)
    transformer = models.lockstep.model.lm_gen.lm_model.transformer
    swapped = any(isinstance(m, Fp8CacheAttention) for m in transformer.modules())
    assert swapped == (request.param == "fp8")
    try:
        yield f"127.0.0.1:{port}", registry
    finally:
        await server.stop(None)
        await models.close()


async def test_a_bound_session_gets_a_frame_per_step(
    worker: tuple[str, CollectorRegistry],
) -> None:
    address, registry = worker
    enough = asyncio.Event()

    async def requests() -> AsyncIterator[pb.Stage0Request]:
        yield pb.Stage0Request(open=pb.Stage0Open(session_id="s1", lane=pb.LANE_NATIVE))
        speech = voice(2, FRAMES + 4)
        for i in range(0, len(speech), 1920):  # 40 ms chunks, a little ahead of real time
            yield pb.Stage0Request(audio=pb.Stage0Audio(epoch=0, pcm16=speech[i : i + 1920]))
            await asyncio.sleep(0.02)
        await enough.wait()

    async with grpc.aio.insecure_channel(address) as channel:
        stub = stage_pb2_grpc.Stage0ServiceStub(channel)
        info = await stub.Describe(pb.DescribeRequest(), timeout=10)
        caps = info.capabilities
        assert info.backend == "moshi" and info.capacity == 2
        assert caps.implementation_level == "model_native_duplex" and caps.model_native
        assert caps.input_sample_rate_hz == 24_000 and caps.chunk_period_ms == 80
        assert caps.supports_input_append and not caps.supports_barge_in
        frames: list[pb.ModelFrame] = []
        call = stub.Bind(requests(), timeout=30)
        async for event in call:
            assert event.WhichOneof("kind") == "frame", event
            frames.append(event.frame)
            if len(frames) == FRAMES:
                enough.set()
        assert await call.code() == grpc.StatusCode.OK
    assert len(frames) >= FRAMES
    assert [f.index for f in frames] == list(range(len(frames)))
    assert all(len(f.codes) == 8 for f in frames)
    assert (registry.get_sample_value("antiphon_stage0_duplex_step_seconds_count") or 0) >= FRAMES
    # The session left: its row is free again.
    assert registry.get_sample_value("antiphon_stage0_duplex_rows_active") == 0


async def test_a_context_in_comes_back_taken_at_the_frame_with_its_last_token(
    worker: tuple[str, CollectorRegistry],
) -> None:
    address, _ = worker
    taken = asyncio.Event()

    async def requests() -> AsyncIterator[pb.Stage0Request]:
        yield pb.Stage0Request(open=pb.Stage0Open(session_id="s1", lane=pb.LANE_NATIVE))
        yield pb.Stage0Request(context=pb.Stage0Context(epoch=2, id="c1", text="hi there"))
        await taken.wait()

    async with grpc.aio.insecure_channel(address) as channel:
        stub = stage_pb2_grpc.Stage0ServiceStub(channel)
        caps = (await stub.Describe(pb.DescribeRequest(), timeout=10)).capabilities
        assert caps.supports_context_text
        frames: dict[int, pb.ModelFrame] = {}
        got: pb.ContextTaken | None = None
        call = stub.Bind(requests(), timeout=30)
        async for event in call:
            kind = event.WhichOneof("kind")
            assert kind in ("frame", "context_taken"), event
            if kind == "frame":
                frames[event.frame.index] = event.frame
            else:
                got = event.context_taken
            if got is not None and got.index in frames:
                taken.set()
        assert await call.code() == grpc.StatusCode.OK
    assert got is not None and (got.epoch, got.id) == (2, "c1")
    # Its last token ("e" of "there", a token a character on random weights)
    # is that frame's text.
    assert frames[got.index].text == " w" + str(4 + ord("e") % 4)


async def test_a_moshi_worker_without_a_checkpoint_says_which_setting() -> None:
    settings = Stage0Settings(backend="moshi")
    with pytest.raises(SystemExit, match="duplex_checkpoint"):
        await load_engines(settings, Stage0Metrics(CollectorRegistry()))
