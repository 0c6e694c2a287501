"""A `mimi` worker as a stepper and front-end processes (`duplex_front_ends`,
stage1/duplex_front_ends.py): sessions served through two front ends get
sample for sample the audio the single-process worker gives them for the
same codes, as they join and leave; a front end killed loses only its own
sessions (and comes back); a stepper killed ends every stream UNAVAILABLE;
SIGTERM drains; front ends load no torch.

Real processes (`python -m antiphon.stage1.main` on the tiny random model),
real gRPC on loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from antiphon.stage1.backends.mimi.shared_rows import RING_FRAMES, CodeRing, SharedRows
from antiphon.stage1.duplex_front_ends import check, shares
from antiphon.stage1.settings import Stage1Settings
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from bench.lib.prometheus import scrape
from tests.support.pod import (
    Pod,
    assert_front_ends_hold_no_torch,
    assert_sigterm_drains,
    duplex_pod,
    kill_front_end,
    kill_stepper,
    one_and_two,
)

SERVICE = "antiphon.v1.Stage1Service"
CODEBOOKS = 8


# ---------------------------------------------------------------- the layout
def test_front_ends_split_the_rows_and_one_process_is_the_default() -> None:
    assert Stage1Settings().duplex_front_ends == 1
    settings = Stage1Settings(
        backend="mimi", listen="0.0.0.0:50071", capacity=5, duplex_front_ends=2
    )
    own = shares(settings)
    assert [s.listen for s, _ in own] == ["0.0.0.0:50071", "0.0.0.0:50072"]
    assert [(s.capacity, rows) for s, rows in own] == [(3, range(0, 3)), (2, range(3, 5))]
    with pytest.raises(SystemExit, match="piper"):
        check(Stage1Settings(duplex_front_ends=2, capacity=4))
    with pytest.raises(SystemExit, match="capacity 1"):
        check(Stage1Settings(backend="mimi", duplex_front_ends=2, capacity=1))
    with pytest.raises(SystemExit, match="worker_processes"):
        check(Stage1Settings(backend="mimi", duplex_front_ends=2, worker_processes=2))
    check(Stage1Settings(backend="mimi", duplex_front_ends=2, capacity=2))


def test_a_row_of_codes_in_shared_memory_goes_round_its_ring_in_order() -> None:
    shared = SharedRows.create(2)
    try:
        writer, reader = CodeRing(SharedRows.attach(shared.layout), 1), CodeRing(shared, 1)
        for index in range(RING_FRAMES * 3):
            writer.push([index, index + 1])
            assert writer.waiting == 1
            head = reader.head(2)
            assert head is not None and list(head) == [index, index + 1]
            reader.pop()
            assert reader.head(2) is None
        # A new session starts at its mark: the last one's frames are not decoded.
        writer.push([1, 2])
        reader.skip_to(writer.written)
        assert reader.head(2) is None and reader.waiting == 0
    finally:
        shared.close(unlink=True)


# ---------------------------------------------------------------- real processes
def _env(capacity: int) -> dict[str, str]:
    return {
        "ANTIPHON_BACKEND": "mimi",
        "ANTIPHON_DUPLEX_CHECKPOINT": "random:tiny",
        "ANTIPHON_CAPACITY": str(capacity),
        "NO_TORCH_COMPILE": "1",
    }


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pod, Pod]]:
    """The same worker twice: one process, and a stepper with two front ends."""
    tmp = tmp_path_factory.mktemp("mimi-front-ends")
    with one_and_two("stage1", tmp, _env(4), SERVICE) as pods:
        yield pods


class Session:
    """One Bind stream: opens, sends `frames` frames of a response (`pace_s`
    apart), ends the response, and leaves once its audio and its end came
    (or its stream ended)."""

    def __init__(self, address: str, seed: int, frames: int, pace_s: float = 0.0) -> None:
        self.address = address
        self.seed = seed
        self.frames = frames
        self.pace_s = pace_s
        self.pcm: list[bytes] = []
        self.code: grpc.StatusCode | None = None
        self._got = asyncio.Event()

    def _frame(self, index: int) -> pb.Stage1Request:
        codes = [(self.seed * 131 + index * 7 + k * 3) % 32 for k in range(CODEBOOKS)]
        return pb.Stage1Request(
            frame=pb.DecodeFrame(epoch=1, response_id="r", codes=codes, text="a", index=index)
        )

    async def has(self, count: int) -> None:
        while len(self.pcm) < count:
            self._got.clear()
            await asyncio.wait_for(self._got.wait(), 30)

    async def run(self) -> None:
        async with grpc.aio.insecure_channel(self.address) as channel:
            call = stage_pb2_grpc.Stage1ServiceStub(channel).Bind()
            reader = asyncio.create_task(self._read(call))
            try:
                await call.write(pb.Stage1Request(open=pb.Stage1Open(session_id=f"s{self.seed}")))
                for index in range(self.frames):
                    await call.write(self._frame(index))
                    await asyncio.sleep(self.pace_s)
                final = pb.SynthesizeText(epoch=1, response_id="r", final=True)
                await call.write(pb.Stage1Request(text=final))
                await asyncio.wait_for(asyncio.shield(reader), 60)
                await call.done_writing()
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                pass
            await asyncio.wait_for(reader, 60)
            self.code = await call.code()

    async def _read(
        self, call: grpc.aio.StreamStreamCall[pb.Stage1Request, pb.Stage1Event]
    ) -> None:
        try:
            async for event in call:
                if event.WhichOneof("kind") == "audio":
                    self.pcm.append(event.audio.pcm16)
                    self._got.set()
                elif event.WhichOneof("kind") == "done":
                    return
        except grpc.aio.AioRpcError:
            self._got.set()


async def _join_and_leave(addresses: list[str]) -> dict[int, list[bytes]]:
    """Sessions 1 and 2 together, 3 joining while they run, 4 after 1 left
    (on its row, in either layout)."""
    spread = {seed: addresses[seed % len(addresses)] for seed in range(1, 5)}
    s1, s2 = Session(spread[1], 1, 8, 0.02), Session(spread[2], 2, 16, 0.02)
    tasks = [asyncio.create_task(s.run()) for s in (s1, s2)]
    await s1.has(2)
    s3 = Session(spread[3], 3, 10, 0.02)
    tasks.append(asyncio.create_task(s3.run()))
    await tasks[0]
    s4 = Session(spread[1], 4, 6)
    await s4.run()
    await asyncio.gather(*tasks)
    return {s.seed: s.pcm for s in (s1, s2, s3, s4)}


@pytest.mark.models
async def test_sessions_through_two_front_ends_hear_what_one_process_gives_them(
    pods: tuple[Pod, Pod],
) -> None:
    one, two = pods
    alone = await _join_and_leave(one.addresses())
    split = await _join_and_leave(two.addresses())
    for seed, pcm in alone.items():
        assert len(pcm) == {1: 8, 2: 16, 3: 10, 4: 6}[seed], seed
        assert all(len(chunk) == 1920 * 2 for chunk in pcm)
        assert np.abs(np.frombuffer(b"".join(pcm), np.int16)).max() > 0, seed
        assert split[seed] == pcm, seed


@pytest.mark.models
def test_front_ends_do_not_load_torch_and_one_process_has_none(pods: tuple[Pod, Pod]) -> None:
    assert_front_ends_hold_no_torch(*pods)


@pytest.mark.models
async def test_a_front_end_killed_loses_its_own_sessions_only_and_comes_back(
    pods: tuple[Pod, Pod],
) -> None:
    _, two = pods
    first, second = two.addresses()
    lost, kept = Session(first, 5, 1000, 0.05), Session(second, 6, 40, 0.05)
    tasks = [asyncio.create_task(s.run()) for s in (lost, kept)]
    await asyncio.gather(lost.has(3), kept.has(3))
    # Each front end's own metrics: its one session and row; the stepper's: the step.
    for port in (two.metrics_port, two.metrics_port + 1):
        seen = scrape([port])
        assert seen["antiphon_stage1_sessions_active"] == 1
        assert seen["antiphon_stage1_duplex_rows_active"] == 1
    assert scrape([two.metrics_port + 2])["antiphon_stage1_duplex_step_seconds_count"] > 0
    kill_front_end(two, 0)
    await asyncio.wait_for(tasks[0], 30)
    assert lost.code == grpc.StatusCode.UNAVAILABLE
    at = len(kept.pcm)
    await asyncio.wait_for(tasks[1], 60)
    # The other front end's session went on, frame after frame.
    assert kept.code == grpc.StatusCode.OK and len(kept.pcm) == 40 > at
    # Started again on its port and rows: it serves a new session.
    await two.ready(SERVICE, timeout_s=60)
    again = Session(first, 7, 4)
    await asyncio.wait_for(again.run(), 60)
    assert again.code == grpc.StatusCode.OK and len(again.pcm) == 4


@pytest.mark.models
async def test_sigterm_drains_the_front_ends_then_the_stepper_stops(
    pods: tuple[Pod, Pod],
) -> None:
    await assert_sigterm_drains(pods[1])


@pytest.mark.models
async def test_the_stepper_killed_ends_every_stream_unavailable(tmp_path: Path) -> None:
    pod = duplex_pod("stage1", tmp_path, 2, _env(2))
    try:
        await pod.ready(SERVICE)
        sessions = [Session(a, 10 + k, 1000, 0.05) for k, a in enumerate(pod.addresses())]
        tasks = [asyncio.create_task(s.run()) for s in sessions]
        await asyncio.gather(*(s.has(2) for s in sessions))
        await kill_stepper(pod, tasks)
        for session in sessions:
            assert session.code == grpc.StatusCode.UNAVAILABLE, session.seed
    finally:
        pod.kill()
