"""A `moshi` worker as a stepper and front-end processes (`duplex_front_ends`,
duplex_front_ends.py): sessions served through two front ends get token for
token what the single-process worker gives them, and moshi's own loop, as
they join and leave; a front end killed loses only its own sessions (and
comes back); a stepper killed ends every stream UNAVAILABLE; SIGTERM drains.

Real processes (`python -m antiphon.stage0.main` on the tiny random model,
greedy), real gRPC on loopback. A session joins just after another's frame
came, so that its open and its audio are in before the next step in either
layout: the first step of its row hears its first frame.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
import torch

from antiphon.stage0.backends.moshi.rows import FRAME_BYTES, JitterBuffer
from antiphon.stage0.backends.moshi.shared_rows import DEPTH, AudioRing, SharedRows, StepSlots
from antiphon.stage0.duplex_front_ends import check, shares
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from bench.lib.prometheus import scrape
from tests.stage0.duplex_reference import SEED, reference, tiny_parts, voice
from tests.support.pod import (
    Pod,
    assert_front_ends_hold_no_torch,
    assert_sigterm_drains,
    duplex_pod,
    kill_front_end,
    kill_stepper,
    one_and_two,
)

SERVICE = "antiphon.v1.Stage0Service"
Frames = list[tuple[str, list[int]]]


# ---------------------------------------------------------------- the layout
def test_front_ends_split_the_rows_as_they_split_the_capacity() -> None:
    settings = Stage0Settings(
        backend="moshi", listen="0.0.0.0:50061", capacity=5, duplex_front_ends=2
    )
    own = shares(settings)
    assert [s.listen for s, _ in own] == ["0.0.0.0:50061", "0.0.0.0:50062"]
    assert [(s.capacity, rows) for s, rows in own] == [(3, range(0, 3)), (2, range(3, 5))]


def test_a_layout_that_cannot_serve_is_refused_and_one_process_is_the_default() -> None:
    assert Stage0Settings().duplex_front_ends == 1
    with pytest.raises(SystemExit, match="cascade"):
        check(Stage0Settings(duplex_front_ends=2, capacity=4))
    with pytest.raises(SystemExit, match="capacity 1"):
        check(Stage0Settings(backend="moshi", duplex_front_ends=2, capacity=1))
    with pytest.raises(SystemExit, match="llm_front_ends"):
        check(Stage0Settings(backend="moshi", duplex_front_ends=2, llm_front_ends=2, capacity=4))
    check(Stage0Settings(backend="moshi", duplex_front_ends=2, capacity=2))


# ---------------------------------------------------------------- shared memory
def test_a_ring_in_shared_memory_keeps_the_jitter_buffers_contract() -> None:
    """Pushed in odd sizes past its limit and around the ring's end, a row's
    ring gives the frames a JitterBuffer would, and drops as much."""
    shared = SharedRows.create(2, jitter_ms=400)
    try:
        writer = AudioRing(SharedRows.attach(shared.layout), 1)
        reader, buffer = AudioRing(shared, 1), JitterBuffer(400)
        pcm = voice(1, 60)
        sizes, at, dropped = [1000, 7000, 3840, 20_000, 2], 0, 0
        for step in range(40):
            chunk = pcm[at : at + sizes[step % len(sizes)]]
            at += len(chunk)
            writer.push(chunk, epoch=step)
            dropped += buffer.push(chunk)
            assert reader.take_frame() == buffer.take_frame(), step
            assert reader.buffered_ms == buffer.buffered_ms
        assert reader.dropped_ms == dropped > 0
        assert reader.epoch == 39
        # A clear drops what was sent before its mark, not what came after.
        reader.mark = writer.written
        writer.push(pcm[:FRAME_BYTES])
        reader.clear()
        assert reader.take_frame() == pcm[:FRAME_BYTES] and reader.take_frame() is None
    finally:
        shared.close(unlink=True)


def test_a_slot_says_its_events_none_or_lost() -> None:
    shared = SharedRows.create(3, jitter_ms=80)
    try:
        slots, seen = StepSlots(shared), StepSlots(SharedRows.attach(shared.layout))
        assert slots.write(1, 2, token=7, events=[b"ab", b"", b"cde"])
        assert seen.read(1, 2, token=7) == [b"ab", b"", b"cde"]
        # Another session's (the row's last), or a step the row had nothing in.
        assert seen.read(1, 2, token=8) == [] and seen.read(2, 2, token=7) == []
        # Too big for a slot: it says none (the stepper sends them by the pipe).
        assert not slots.write(2, 2, token=7, events=[bytes(600)])
        assert seen.read(2, 2, token=7) == []
        # A reader DEPTH steps behind finds its step written over.
        slots.write(1 + DEPTH, 2, token=7, events=[b"x"])
        assert seen.read(1, 2, token=7) is None
    finally:
        shared.close(unlink=True)


# ---------------------------------------------------------------- real processes
def _env(capacity: int) -> dict[str, str]:
    return {
        "ANTIPHON_BACKEND": "moshi",
        "ANTIPHON_DUPLEX_CHECKPOINT": "random:tiny",
        "ANTIPHON_DUPLEX_SEED": str(SEED),
        "ANTIPHON_DUPLEX_TEMPERATURE": "0",
        "ANTIPHON_DUPLEX_TEXT_TEMPERATURE": "0",
        "ANTIPHON_DUPLEX_JITTER_MS": "20000",
        "ANTIPHON_CAPACITY": str(capacity),
        "NO_TORCH_COMPILE": "1",
    }


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pod, Pod]]:
    """The same worker twice: one process, and a stepper with two front ends."""
    tmp = tmp_path_factory.mktemp("duplex-front-ends")
    with one_and_two("stage0", tmp, _env(4), SERVICE) as pods:
        yield pods


class Session:
    """One Bind stream: opens, sends `frames` of input `kind` at once, and
    leaves once it has `wanted` frames (or its stream ends)."""

    def __init__(self, address: str, name: str, kind: int, wanted: int) -> None:
        self.address, self.name, self.kind, self.wanted = address, name, kind, wanted
        self.frames: list[pb.ModelFrame] = []
        self.errors: list[pb.StageError] = []
        self.code: grpc.StatusCode | None = None
        self.got = asyncio.Condition()
        self._leave = asyncio.Event()

    async def _requests(self) -> AsyncIterator[pb.Stage0Request]:
        yield pb.Stage0Request(open=pb.Stage0Open(session_id=self.name, lane=pb.LANE_NATIVE))
        audio = voice(self.kind, self.wanted + 8)
        yield pb.Stage0Request(audio=pb.Stage0Audio(epoch=1, pcm16=audio))
        await self._leave.wait()

    async def run(self) -> None:
        async with grpc.aio.insecure_channel(self.address) as channel:
            call = stage_pb2_grpc.Stage0ServiceStub(channel).Bind(self._requests(), timeout=120)
            try:
                async for event in call:
                    if event.WhichOneof("kind") == "error":
                        self.errors.append(event.error)
                        continue
                    async with self.got:
                        self.frames.append(event.frame)
                        self.got.notify_all()
                    if len(self.frames) == self.wanted:
                        self._leave.set()
                self.code = await call.code()
            except grpc.aio.AioRpcError as exc:
                self.code = exc.code()
            finally:
                self._leave.set()
                async with self.got:
                    self.got.notify_all()

    async def has(self, count: int) -> None:
        async with self.got:
            await self.got.wait_for(lambda: len(self.frames) >= count or self._leave.is_set())

    def tokens(self) -> Frames:
        return [(f.text, list(f.codes)) for f in self.frames]


async def _plan(addresses: list[str]) -> dict[str, Session]:
    """a from the start; b joins at a's 5th frame, c at its 10th, d at its
    18th (in b's row when b has left by then), each on a front end in turn."""
    joins = {"b": (1, 5, 10), "c": (2, 10, 20), "d": (3, 18, 14)}
    sessions = {"a": Session(addresses[0], "a", 4, 36)}
    tasks = [asyncio.create_task(sessions["a"].run())]
    for k, (name, (kind, at, wanted)) in enumerate(joins.items()):
        await sessions["a"].has(at)
        sessions[name] = Session(addresses[(k + 1) % len(addresses)], name, kind, wanted)
        tasks.append(asyncio.create_task(sessions[name].run()))
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    return sessions


def _expected(session: Session) -> Frames:
    lm, _ = tiny_parts(torch.float32)
    silent = {lm.text_padding_token_id, lm.end_of_text_padding_id}
    # More steps than it heard frames: its first come max_delay steps late.
    made = reference(voice(session.kind, session.wanted + 8), session.wanted + 8, torch.float32)
    return [("" if t in silent else f" w{t}", codes) for t, codes in made[: session.wanted]]


@pytest.mark.models
async def test_sessions_through_two_front_ends_get_what_one_process_gives_them(
    pods: tuple[Pod, Pod],
) -> None:
    one, two = pods
    alone = await _plan(one.addresses())
    split = await _plan(two.addresses())
    assert {s.address for s in split.values()} == set(two.addresses())
    for name, session in split.items():
        assert session.code == grpc.StatusCode.OK and not session.errors, name
        assert [f.index for f in session.frames] == list(range(session.wanted)), name
        assert session.tokens() == alone[name].tokens() == _expected(session), name
        assert all(f.epoch == 1 for f in session.frames)
    # Different inputs, different answers: a row that heard another's would show.
    assert len({tuple(map(str, s.tokens())) for s in split.values()}) == 4


@pytest.mark.models
def test_front_ends_do_not_load_torch_and_one_process_has_none(pods: tuple[Pod, Pod]) -> None:
    assert_front_ends_hold_no_torch(*pods)


def _rows_active(pod: Pod) -> float | None:
    return scrape([pod.metrics_port + pod.count]).get("antiphon_stage0_duplex_rows_active")


@pytest.mark.models
async def test_a_front_end_killed_loses_its_own_sessions_only_and_comes_back(
    pods: tuple[Pod, Pod],
) -> None:
    _, two = pods
    first, second = two.addresses()
    lost, kept = Session(first, "lost", 1, 1000), Session(second, "kept", 2, 60)
    tasks = [asyncio.create_task(s.run()) for s in (lost, kept)]
    await asyncio.gather(lost.has(3), kept.has(3))
    assert _rows_active(two) == 2
    # Each front end's own metrics: its one session; the stepper's: the step.
    for port in (two.metrics_port, two.metrics_port + 1):
        assert scrape([port])["antiphon_stage0_sessions_active"] == 1
    assert scrape([two.metrics_port + 2])["antiphon_stage0_duplex_step_seconds_count"] > 0
    kill_front_end(two, 0)
    await asyncio.wait_for(tasks[0], 30)
    assert lost.code == grpc.StatusCode.UNAVAILABLE
    at = len(kept.frames)
    await asyncio.wait_for(tasks[1], 60)
    # The other front end's session went on, frame after frame.
    assert kept.code == grpc.StatusCode.OK and len(kept.frames) == 60 > at
    assert [f.index for f in kept.frames] == list(range(60))
    assert _rows_active(two) == 0
    # Started again on its port and rows: it serves a new session.
    await two.ready(SERVICE, timeout_s=60)
    again = Session(first, "again", 3, 4)
    await asyncio.wait_for(again.run(), 60)
    assert again.code == grpc.StatusCode.OK and len(again.frames) == 4


@pytest.mark.models
async def test_sigterm_drains_the_front_ends_then_the_stepper_stops(
    pods: tuple[Pod, Pod],
) -> None:
    await assert_sigterm_drains(pods[1])


@pytest.mark.models
async def test_the_stepper_killed_ends_every_stream_unavailable(tmp_path: Path) -> None:
    pod = duplex_pod("stage0", tmp_path, 2, _env(2))
    try:
        await pod.ready(SERVICE)
        sessions = [Session(a, f"s{k}", k, 1000) for k, a in enumerate(pod.addresses())]
        tasks = [asyncio.create_task(s.run()) for s in sessions]
        await asyncio.gather(*(s.has(2) for s in sessions))
        await kill_stepper(pod, tasks)
        for session in sessions:
            assert session.code == grpc.StatusCode.UNAVAILABLE, session.name
    finally:
        pod.kill()
