"""A duplex session's requests on its row: open takes a row, audio feeds it
(overflow counted), a commit is answered at once with the audio heard since
the last, clear_input drops what waits, a cancel stamps the new epoch and
mutes the model's answer until it has gone quiet, close frees the row."""

from __future__ import annotations

import pytest
import torch
from prometheus_client import CollectorRegistry

from antiphon.stage0.backends.moshi.lockstep import Lockstep
from antiphon.stage0.backends.moshi.session import DuplexSession
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb
from tests.stage0.duplex_reference import tiny_lockstep, voice

pytestmark = pytest.mark.models


def opened(
    lockstep: Lockstep, events: list[pb.Stage0Event], session_id: str = "s"
) -> DuplexSession:
    session = DuplexSession(lockstep, events.append)
    session.handle(pb.Stage0Request(open=pb.Stage0Open(session_id=session_id)))
    return session


def audio(epoch: int, pcm16: bytes) -> pb.Stage0Request:
    return pb.Stage0Request(audio=pb.Stage0Audio(epoch=epoch, pcm16=pcm16))


def script(lockstep: Lockstep, text_tokens: list[int]) -> None:
    """The model says `text_tokens`, one a step, whatever it hears (its audio codes 0)."""
    said = iter(text_tokens)
    dep_q = lockstep.model.dep_q

    def compute(batch: object) -> list[list[int]]:
        token = next(said)
        return [[token] + [0] * dep_q for _ in range(lockstep.slots)]

    lockstep.compute = compute  # type: ignore[method-assign,assignment]


async def test_commit_answers_at_once_with_the_audio_heard_since_the_last() -> None:
    lockstep = tiny_lockstep(2, torch.float32)
    events: list[pb.Stage0Event] = []
    session = opened(lockstep, events)
    session.handle(audio(0, voice(1, 7)[: 12_345 * 2]))
    session.handle(pb.Stage0Request(commit=pb.Stage0Commit(epoch=0, item_id="i1")))
    session.handle(audio(0, voice(1, 1)))
    session.handle(pb.Stage0Request(commit=pb.Stage0Commit(epoch=0, item_id="i2")))
    transcripts = [e.transcript for e in events if e.WhichOneof("kind") == "transcript"]
    assert [(t.item_id, t.text, t.audio_ms) for t in transcripts] == [
        ("i1", "", 12_345 * 1000 // 24_000),
        ("i2", "", 80),
    ]
    await session.close()


async def test_overflow_is_counted_and_clear_input_drops_what_waits() -> None:
    registry = CollectorRegistry()
    lockstep = tiny_lockstep(1, torch.float32, metrics=Stage0Metrics(registry), jitter_ms=800)
    session = opened(lockstep, [])
    session.handle(audio(0, voice(1, 12)))
    assert registry.get_sample_value("antiphon_stage0_duplex_dropped_input_ms_total") == 160
    row = session.row
    assert row is not None and row.audio.buffered_ms == 800
    session.handle(pb.Stage0Request(clear_input=pb.Stage0ClearInput(epoch=0)))
    assert row.audio.buffered_ms == 0
    await session.close()


async def test_a_cancel_stamps_the_epoch_and_mutes_until_quiet() -> None:
    lockstep = tiny_lockstep(1, torch.float32, quiet_frames=2)
    events: list[pb.Stage0Event] = []
    session = opened(lockstep, events)
    w, pad = 5, lockstep.model.lm_gen.lm_model.text_padding_token_id
    script(lockstep, [w, w, w, pad, w, pad, pad, w])
    for _ in range(2):
        lockstep.step()
    session.handle(pb.Stage0Request(cancel=pb.Stage0Cancel(epoch=3)))
    session.handle(pb.Stage0Request(generate=pb.Generate(epoch=3, response_id="r")))
    for _ in range(6):
        lockstep.step()
    frames = [e.frame for e in events]
    assert [(f.epoch, f.text, f.decision) for f in frames] == [
        (0, " w5", pb.DECISION_SPEAK),
        (0, " w5", pb.DECISION_SPEAK),
        # Muted: the cancelled answer goes on, a short pause and all...
        (3, " w5", pb.DECISION_LISTEN),
        (3, "", pb.DECISION_LISTEN),
        (3, " w5", pb.DECISION_LISTEN),
        (3, "", pb.DECISION_LISTEN),
        # ...until the model has been quiet two frames: then its next word speaks.
        (3, "", pb.DECISION_LISTEN),
        (3, " w5", pb.DECISION_SPEAK),
    ]
    assert [f.index for f in frames] == list(range(8))
    await session.close()


async def test_close_frees_the_row_and_a_request_before_open_is_an_error() -> None:
    lockstep = tiny_lockstep(1, torch.float32)
    events: list[pb.Stage0Event] = []
    early = DuplexSession(lockstep, events.append)
    early.handle(audio(0, voice(1, 1)))
    assert events[0].error.code == "not_open"
    session = opened(lockstep, [])
    assert lockstep.active == 1
    await session.close()
    assert lockstep.active == 0
    # Full: the next open is answered with an error, not a row someone has.
    opened(lockstep, [])
    full: list[pb.Stage0Event] = []
    opened(lockstep, full)
    assert full[0].error.code == "capacity_exceeded"
