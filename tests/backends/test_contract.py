"""The backend contract (docs/backends.md), run over every registered backend.

Each backend runs as it is served: its stage's worker process
(`python -m antiphon.stage<N>.main`), its gRPC on loopback, the test profile
plus the kit entry's settings (tests/backends/kit.py). A backend passes when:
it describes itself as its registry entry declares; a bound session fed what
its stage carries answers, honours what it declared, and closes cleanly; the
worker takes exactly its capacity of sessions and refuses one more; a
cancelled session gives its slot back; and the worker's death ends its
streams with UNAVAILABLE, so that the session service can move them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import psutil
import pytest
from stack import LocalStack, Ports, free_port

from antiphon.common import config, stage_audio
from antiphon.stage0 import backends as stage0_backends
from antiphon.stage0.settings import Stage0Settings
from antiphon.stage1 import backends as stage1_backends
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from tests.backends.kit import CAPACITY, ENTRIES, Entry, admission, events
from tests.support import tiers

pytestmark = [pytest.mark.stack, pytest.mark.models]

EVENT_TIMEOUT_S = 60.0
SERVICE = {"stage0": "antiphon.v1.Stage0Service", "stage1": "antiphon.v1.Stage1Service"}


def test_every_registered_backend_has_a_kit_entry() -> None:
    registered = {("stage0", n) for n in stage0_backends.BACKENDS} | {
        ("stage1", n) for n in stage1_backends.BACKENDS
    }
    assert {(e.stage, e.backend) for e in ENTRIES} == registered


@dataclass
class Worker:
    entry: Entry
    stack: LocalStack
    port: int
    env: dict[str, str]

    def channel(self) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")

    def stub(self, channel: grpc.aio.Channel) -> Any:
        if self.entry.stage == "stage0":
            return stage_pb2_grpc.Stage0ServiceStub(channel)
        return stage_pb2_grpc.Stage1ServiceStub(channel)

    def declared(self, monkeypatch: pytest.MonkeyPatch) -> cpb.Capabilities:
        """What the registry says this worker's backend does, for the settings
        the worker itself read (its environment and the profile)."""
        if self.entry.stage == "stage1":
            return stage1_backends.load(self.entry.backend).capabilities
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)
        return stage0_backends.get(self.entry.backend).capabilities(config.load(Stage0Settings))


@pytest.fixture(scope="module", params=ENTRIES, ids=lambda e: e.id)
def backend_worker(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Worker]:
    entry: Entry = request.param
    # A database of its own: the worker lists itself in the registry there.
    stack = LocalStack(ports=Ports.free(), redis_url=f"{redis_url.rsplit('/', 1)[0]}/20")
    port = free_port()
    settings = {"ANTIPHON_BACKEND": entry.backend, "ANTIPHON_CAPACITY": str(CAPACITY), **entry.env}
    # What the worker reads (spawn_grpc adds its addresses), for `declared`.
    env = {**stack.base_env(), **settings}
    tiers.require(request, tiers.STACK, "starts a stage worker")
    tiers.require(request, tiers.MODELS, "loads a backend's engines")
    try:
        stack.spawn_grpc(entry.id, entry.stage, port, free_port(), **settings)
        stack.wait_grpc_ready(port, SERVICE[entry.stage], timeout_s=entry.load_s)
        yield Worker(entry, stack, port, env)
    finally:
        stack.stop()


@pytest.fixture
async def stub(backend_worker: Worker) -> AsyncIterator[Any]:
    async with backend_worker.channel() as channel:
        yield backend_worker.stub(channel)


def hears_at(backend_worker: Worker, caps: cpb.Capabilities) -> int:
    """The rate a session's input is sent at: what a stage0 backend declares
    it hears (unset: the session's default, as stage_links.py reads it);
    stage1 is sent text and answers at 24 kHz."""
    if backend_worker.entry.stage == "stage1":
        return 24000
    return caps.input_sample_rate_hz or stage_audio.RATE


async def test_it_describes_itself_as_its_registry_entry_declares(
    backend_worker: Worker, stub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = await stub.Describe(pb.DescribeRequest(), timeout=10)
    assert (info.backend, info.capacity) == (backend_worker.entry.backend, CAPACITY)
    assert info.capabilities == backend_worker.declared(monkeypatch)
    if backend_worker.entry.stage == "stage0":
        declared_rate = stage0_backends.get(backend_worker.entry.backend).input_sample_rate_hz
        assert hears_at(backend_worker, info.capabilities) == declared_rate


async def test_a_session_answers_honours_its_capabilities_and_closes(
    backend_worker: Worker, stub: Any
) -> None:
    caps = (await stub.Describe(pb.DescribeRequest(), timeout=10)).capabilities
    call = stub.Bind()
    feeding = asyncio.create_task(backend_worker.entry.feed(call, hears_at(backend_worker, caps)))
    kinds: list[str] = []
    async for event in events(call, EVENT_TIMEOUT_S):
        kind = event.WhichOneof("kind")
        assert kind != "error", event
        kinds.append(kind)
        if kind == "audio" and caps.supports_audio_truncate:
            # Truncation maps played audio to text: every chunk says where its words end.
            assert event.audio.marks, event
        if kind == backend_worker.entry.answers_with:
            break
    assert kinds and kinds[-1] == backend_worker.entry.answers_with, kinds
    # A model-native stage0 speaks in model frames; the cascade's kinds never are.
    if backend_worker.entry.stage == "stage0":
        assert ("frame" in kinds) == caps.model_native, kinds
    await feeding
    await call.done_writing()
    async for _ in events(call, EVENT_TIMEOUT_S):
        pass  # what was already on its way, then the end
    assert await call.code() == grpc.StatusCode.OK


async def test_text_into_a_running_context_is_taken_or_refused_as_declared(
    backend_worker: Worker, stub: Any
) -> None:
    """Stage0: a `Stage0Context` is taken (`ContextTaken`) where the backend
    declares `supports_context_text`, else refused typed with its id."""
    if backend_worker.entry.stage != "stage0":
        pytest.skip("stage1 takes no context text")
    caps = (await stub.Describe(pb.DescribeRequest(), timeout=10)).capabilities
    call = stub.Bind()
    await call.write(opening("stage0", "kit-context"))
    text = pb.Stage0Context(epoch=1, id="ctx-1", text="Paris is the capital.")
    await call.write(pb.Stage0Request(context=text))
    async for event in events(call, EVENT_TIMEOUT_S):
        kind = event.WhichOneof("kind")
        if kind in ("context_taken", "error"):
            break
    else:
        pytest.fail("the stream ended before the context was answered")
    if caps.supports_context_text:
        assert kind == "context_taken", event
        assert (event.context_taken.id, event.context_taken.epoch) == ("ctx-1", 1)
    else:
        assert kind == "error", event
        assert (event.error.code, event.error.response_id) == ("unsupported_capability", "ctx-1")
    await call.done_writing()
    async for _ in events(call, EVENT_TIMEOUT_S):
        pass  # what was already on its way, then the end: its slot is free again
    assert await call.code() == grpc.StatusCode.OK


def opening(stage: str, name: str) -> Any:
    if stage == "stage0":
        return pb.Stage0Request(open=pb.Stage0Open(session_id=name, lane=pb.LANE_MANUAL))
    return pb.Stage1Request(open=pb.Stage1Open(session_id=name))


@dataclass
class Bound:
    call: Any
    # None while the worker holds the session; else what it was refused with.
    status: grpc.StatusCode | None
    # The first read, left waiting on a held session (a timed-out read would
    # cancel the call, and with it the session).
    reading: asyncio.Future[Any] | None = None

    async def hang_up(self) -> None:
        self.call.cancel()
        if self.reading is not None:
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
                await self.reading


async def bind(stub: Any, stage: str, name: str) -> Bound:
    """A stream that opens a session, once the worker has admitted it."""
    call = stub.Bind()
    if (refused := await admission(call)) is not None:
        return Bound(call, refused)
    await call.write(opening(stage, name))
    reading = asyncio.ensure_future(call.read())
    done, _ = await asyncio.wait({reading}, timeout=1.0)
    if not done:
        return Bound(call, None, reading)
    try:
        event = reading.result()
    except grpc.aio.AioRpcError as err:
        return Bound(call, err.code())
    if event is grpc.aio.EOF:
        return Bound(call, await call.code())
    return Bound(call, None)  # held, and already speaking (a model-native row)


async def test_it_takes_its_capacity_refuses_one_more_and_a_cancel_frees_a_slot(
    backend_worker: Worker, stub: Any
) -> None:
    stage = backend_worker.entry.stage
    held = [await bind(stub, stage, f"s{i}") for i in range(CAPACITY)]
    assert [b.status for b in held] == [None] * CAPACITY
    assert (await bind(stub, stage, "one-too-many")).status == grpc.StatusCode.RESOURCE_EXHAUSTED
    await held[0].hang_up()
    # The slot comes back once the worker sees the cancel.
    for _ in range(30):
        again = await bind(stub, stage, "after-cancel")
        if again.status is None:
            break
        assert again.status == grpc.StatusCode.RESOURCE_EXHAUSTED
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the cancelled session's slot never came back")
    for session in (held[1], again):
        await session.hang_up()


async def test_its_death_ends_every_stream_unavailable(backend_worker: Worker, stub: Any) -> None:
    """Last for each backend: the worker is gone afterwards."""
    doomed = await bind(stub, backend_worker.entry.stage, "doomed")
    assert doomed.status is None
    # What it started (the cascade's vLLM engine core) must not outlive it.
    children = psutil.Process(backend_worker.stack.procs[backend_worker.entry.id].pid).children(
        recursive=True
    )
    backend_worker.stack.kill(backend_worker.entry.id)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        if doomed.reading is not None:
            await asyncio.wait_for(doomed.reading, EVENT_TIMEOUT_S)
        async for _ in events(doomed.call, EVENT_TIMEOUT_S):
            pass
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    _, alive = psutil.wait_procs(children, timeout=EVENT_TIMEOUT_S)
    assert alive == [], [p.name() for p in alive]
