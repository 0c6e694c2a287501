"""A duplex stepper applies a front end's requests as one process does, though
the session's audio comes by shared memory and its other requests by a pipe:
a request acts on the audio sent before it (its mark), never on what came
after; a step's frame is in the row's slot for the session that was there
when the step gathered, and each front end hears of every step once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from prometheus_client import CollectorRegistry

from antiphon.stage0.backends.moshi.crossing import Events, Release, Request, Stepped, ToFrontEnd
from antiphon.stage0.backends.moshi.shared_rows import AudioRing, SharedRows, StepSlots
from antiphon.stage0.backends.moshi.stepper import Stepper
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb
from tests.stage0.duplex_reference import tiny_lockstep, voice

pytestmark = pytest.mark.models


class Port:
    """A front end's end of the pipe: what the stepper sent it."""

    def __init__(self) -> None:
        self.sent: list[ToFrontEnd] = []

    def send(self, message: ToFrontEnd) -> None:
        self.sent.append(message)

    def events(self) -> list[pb.Stage0Event]:
        out = [m for m in self.sent if isinstance(m, Events)]
        self.sent.clear()
        return [pb.Stage0Event.FromString(e) for m in out for e in m.events]


@pytest.fixture
def shared() -> Iterator[SharedRows]:
    rows = SharedRows.create(2, jitter_ms=20_000)
    yield rows
    rows.close(unlink=True)


def stepper_of(shared: SharedRows, registry: CollectorRegistry) -> tuple[Stepper, Port]:
    metrics = Stage0Metrics(registry)
    rings = [AudioRing(shared, row) for row in range(2)]
    lockstep = tiny_lockstep(2, torch.float32, metrics=metrics, audio=rings.__getitem__)
    stepper = Stepper(lockstep, rings, StepSlots(shared), metrics)
    port = Port()
    stepper.connect(0, port)
    return stepper, port


def request(token: int, row: int, mark: int, **kind: object) -> Request:
    return Request(token, row, mark, pb.Stage0Request(**kind).SerializeToString())  # type: ignore[arg-type]


async def test_a_commit_counts_and_a_clear_drops_the_audio_sent_before_it_only(
    shared: SharedRows,
) -> None:
    stepper, port = stepper_of(shared, CollectorRegistry())
    writer = AudioRing(SharedRows.attach(shared.layout), 1)
    # What an earlier session of the row left unheard is not this one's.
    writer.push(voice(1, 2))
    await stepper.apply(0, request(7, 1, writer.written, open=pb.Stage0Open(session_id="s")))
    writer.push(voice(2, 3), epoch=4)
    commit = pb.Stage0Commit(epoch=4, item_id="i1")
    await stepper.apply(0, request(7, 1, writer.written, commit=commit))
    [heard] = port.events()
    assert heard.transcript.audio_ms == 240 and heard.transcript.item_id == "i1"
    writer.push(voice(2, 2))
    clear = pb.Stage0ClearInput(epoch=4)
    mark = writer.written
    # Audio sent after the clear, though here before the stepper applies it.
    writer.push(voice(3, 1))
    await stepper.apply(0, request(7, 1, mark, clear_input=clear))
    reader = AudioRing(shared, 1)
    assert reader.buffered_ms == 80
    await stepper.apply(0, request(7, 1, writer.written, commit=pb.Stage0Commit(epoch=4)))
    assert [e.transcript.audio_ms for e in port.events()] == [80]


async def test_a_steps_frames_are_in_the_slot_of_the_session_that_was_there(
    shared: SharedRows,
) -> None:
    registry = CollectorRegistry()
    stepper, port = stepper_of(shared, registry)
    writer = AudioRing(SharedRows.attach(shared.layout), 0)
    slots = StepSlots(SharedRows.attach(shared.layout))
    await stepper.apply(0, request(3, 0, writer.written, open=pb.Stage0Open(session_id="a")))
    writer.push(voice(4, 6), epoch=2)
    frames: list[pb.ModelFrame] = []
    for _ in range(6):
        batch = stepper.gather()
        stepper.deliver(batch, stepper.compute(batch), late=False)
        [notice] = port.sent
        assert isinstance(notice, Stepped)
        port.sent.clear()
        got = slots.read(notice.step, 0, 3)
        assert got is not None
        frames += [pb.Stage0Event.FromString(e).frame for e in got]
        # Another session's token finds nothing there.
        assert slots.read(notice.step, 0, 4) == []
    assert [f.index for f in frames] == list(range(len(frames))) and len(frames) >= 4
    # The epoch its audio came with stamps its frames.
    assert {f.epoch for f in frames} == {2}
    await stepper.apply(0, Release(3))
    assert registry.get_sample_value("antiphon_stage0_duplex_rows_active") == 0
    # A front end gone takes its sessions with it.
    await stepper.apply(0, request(5, 1, 0, open=pb.Stage0Open(session_id="b")))
    assert registry.get_sample_value("antiphon_stage0_duplex_rows_active") == 1
    await stepper.disconnect(0)
    assert registry.get_sample_value("antiphon_stage0_duplex_rows_active") == 0
