"""A mimi session's framing: which decoded frames come back, as what, and when
a response ends; cancel fences; the session's own rate."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from antiphon.common.audio import duration_ms, float32_to_pcm16
from antiphon.stage1.backends.mimi.lockstep import MimiLockstep
from antiphon.stage1.backends.mimi.session import MimiSession
from antiphon.stage1.metrics import Stage1Metrics
from antiphon.v1 import stage_pb2 as pb

if TYPE_CHECKING:
    from moshi.models.compression import MimiModel


class Bound:
    """A session on the lockstep, with what it emitted."""

    def __init__(self, lockstep: MimiLockstep, rate: int = 24000) -> None:
        self.events: list[pb.Stage1Event] = []
        self.session = MimiSession(lockstep, Stage1Metrics(CollectorRegistry()), self.events.append)
        self.session.handle(
            pb.Stage1Request(open=pb.Stage1Open(session_id="s", sample_rate_hz=rate))
        )
        self.index = 0
        self.rng = np.random.default_rng(rate)
        self.lockstep = lockstep

    def frame(self, epoch: int = 1, response_id: str = "", text: str = "") -> list[int]:
        codes = self.rng.integers(0, self.lockstep.cardinality, self.lockstep.num_codebooks)
        frame = pb.DecodeFrame(
            epoch=epoch, response_id=response_id, codes=codes.tolist(), text=text, index=self.index
        )
        self.index += 1
        self.session.handle(pb.Stage1Request(frame=frame))
        return list(frame.codes)

    def final(self, response_id: str, epoch: int = 1) -> None:
        text = pb.SynthesizeText(epoch=epoch, response_id=response_id, final=True)
        self.session.handle(pb.Stage1Request(text=text))

    def take(self) -> list[pb.Stage1Event]:
        events, self.events[:] = list(self.events), []
        return events


@pytest.fixture
async def lockstep(tiny_mimi: MimiModel) -> AsyncIterator[MimiLockstep]:
    lockstep = MimiLockstep(tiny_mimi, 2, gather_s=0)
    yield lockstep
    await lockstep.close()


def kinds(events: list[pb.Stage1Event]) -> list[str]:
    return [str(e.WhichOneof("kind")) for e in events]


@pytest.mark.models
async def test_frames_of_a_response_come_back_as_80_ms_chunks_with_their_text(
    lockstep: MimiLockstep,
) -> None:
    s = Bound(lockstep)
    s.frame(response_id="r1", text=" Hello")
    s.frame(response_id="r1")
    lockstep.step()
    lockstep.step()
    first, second = (e.audio for e in s.take())
    assert (first.epoch, first.response_id, first.text) == (1, "r1", " Hello")
    assert (first.sample_rate_hz, first.duration_ms) == (24000, 80)
    assert duration_ms(len(first.pcm16), 24000) == 80
    assert [(m.text_chars, m.audio_end_ms) for m in first.marks] == [(6, 80)]
    assert (second.text, list(second.marks)) == ("", [])
    assert first.pcm16 != second.pcm16


@pytest.mark.models
async def test_frames_outside_a_response_are_decoded_and_not_sent(
    lockstep: MimiLockstep, make_tiny_mimi: Callable[[], MimiModel]
) -> None:
    """The silent frames still move the decoder: the chunk after them is the
    one the whole stream decodes to, not a fresh start's."""
    import torch

    s = Bound(lockstep)
    codes = [s.frame(), s.frame(), s.frame(response_id="r1")]
    for _ in codes:
        lockstep.step()
    (event,) = s.take()
    alone = make_tiny_mimi()
    with torch.no_grad(), alone.streaming(1):
        pcm = [alone.decode(torch.tensor(c).view(1, -1, 1))[0, 0].numpy() for c in codes]
    assert event.audio.pcm16 == float32_to_pcm16(pcm[-1])


@pytest.mark.models
async def test_a_final_text_ends_the_response_after_the_audio_sent_before_it(
    lockstep: MimiLockstep,
) -> None:
    s = Bound(lockstep)
    s.frame(response_id="r1", text=" Hi")
    s.frame(response_id="r1")
    s.final("r1")
    s.frame()  # the model has gone quiet: decoded after the response ended
    assert s.take() == []
    lockstep.step()
    assert kinds(s.take()) == ["audio"]
    lockstep.step()
    audio, done = s.take()
    assert audio.audio.response_id == "r1"
    assert (done.done.epoch, done.done.response_id) == (1, "r1")
    assert done.done.first_audio_ms > 0
    lockstep.step()
    assert s.take() == []
    assert lockstep.step() == 0


@pytest.mark.models
async def test_a_final_text_with_nothing_queued_ends_the_response_at_once(
    lockstep: MimiLockstep,
) -> None:
    s = Bound(lockstep)
    s.session.handle(pb.Stage1Request(text=pb.SynthesizeText(epoch=1, response_id="r1", text="x")))
    assert s.take() == []  # text to speak: nothing to do with it here
    s.final("r1")
    (done,) = s.take()
    assert (done.done.response_id, done.done.first_audio_ms) == ("r1", 0)


@pytest.mark.models
async def test_a_cancel_fences_out_older_audio_and_dones_but_decodes_their_frames(
    lockstep: MimiLockstep,
) -> None:
    s = Bound(lockstep)
    s.frame(epoch=1, response_id="r1", text=" a")
    s.frame(epoch=1, response_id="r1", text=" b")
    s.final("r1", epoch=1)
    s.session.handle(pb.Stage1Request(cancel=pb.Stage1Cancel(epoch=2)))
    s.frame(epoch=2, response_id="r2", text=" c")
    s.final("r2", epoch=2)
    s.final("r1", epoch=1)  # late, of a cancelled epoch: ignored
    decoded = [lockstep.step() for _ in range(4)]
    assert decoded == [1, 1, 1, 0]
    events = s.take()
    assert kinds(events) == ["audio", "done"]
    assert (events[0].audio.response_id, events[0].audio.text) == ("r2", " c")
    assert events[1].done.response_id == "r2"


@pytest.mark.models
async def test_a_session_at_16_khz_gets_80_ms_chunks_at_16_khz(lockstep: MimiLockstep) -> None:
    s = Bound(lockstep, rate=16000)
    for i in range(6):
        s.frame(response_id="r1" if i >= 2 else "")
        lockstep.step()
    chunks = [e.audio for e in s.take()]
    assert len(chunks) == 4
    for chunk in chunks:
        assert (chunk.sample_rate_hz, chunk.duration_ms) == (16000, 80)
        assert len(chunk.pcm16) == 16000 * 80 // 1000 * 2
        assert max(abs(int(x)) for x in np.frombuffer(chunk.pcm16, "<i2")) > 100


@pytest.mark.models
async def test_a_malformed_frame_is_refused_with_an_error(lockstep: MimiLockstep) -> None:
    s = Bound(lockstep)
    bad = pb.DecodeFrame(epoch=1, response_id="r1", codes=[1, 2], index=0)
    s.session.handle(pb.Stage1Request(frame=bad))
    (event,) = s.take()
    assert event.error.code == "invalid_frame"
    assert lockstep.step() == 0


@pytest.mark.models
async def test_a_closed_session_gives_its_row_back(lockstep: MimiLockstep) -> None:
    first, second = Bound(lockstep), Bound(lockstep)
    third = Bound(lockstep)
    (event,) = third.take()
    assert event.error.code == "unavailable"
    await first.session.close()
    assert lockstep.rows_active == 1
    fourth = Bound(lockstep)
    assert fourth.take() == []
    assert lockstep.rows_active == 2
    await second.session.close()
    await fourth.session.close()
    assert lockstep.rows_active == 0
