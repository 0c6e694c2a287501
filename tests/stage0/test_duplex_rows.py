"""A duplex row's jitter buffer (bounded, oldest audio dropped and counted, whole
frames only) and its listen/speak decision (SPEAK from the first word, LISTEN
once quiet, a cancel muted until the model has gone quiet)."""

from __future__ import annotations

from antiphon.stage0.backends.moshi.rows import BYTES_PER_MS, FRAME_BYTES, JitterBuffer, Speaking
from antiphon.v1 import stage_pb2 as pb

LISTEN, SPEAK = pb.DECISION_LISTEN, pb.DECISION_SPEAK


def frames(*marks: int) -> bytes:
    return b"".join(bytes([m]) * FRAME_BYTES for m in marks)


def test_a_frame_waits_until_all_of_it_came() -> None:
    buffer = JitterBuffer(2000)
    assert buffer.push(frames(1)[:100]) == 0
    assert buffer.take_frame() is None
    buffer.push(frames(1)[100:] + frames(2)[:10])
    assert buffer.take_frame() == frames(1)
    assert buffer.buffered_ms == 10 // BYTES_PER_MS


def test_overflow_drops_the_oldest_audio_and_says_how_much() -> None:
    buffer = JitterBuffer(160)  # two frames
    assert buffer.push(frames(1, 2)) == 0
    assert buffer.push(frames(3)) == 80
    assert buffer.take_frame() == frames(2)
    assert buffer.take_frame() == frames(3)
    assert buffer.take_frame() is None


def test_clear_drops_what_waits() -> None:
    buffer = JitterBuffer(2000)
    buffer.push(frames(1, 2))
    buffer.clear()
    assert buffer.take_frame() is None and buffer.buffered_ms == 0


def test_speak_from_the_first_word_listen_once_quiet() -> None:
    speaking = Speaking(quiet_frames=3)
    assert [speaking.observe(w) for w in (False, True, False, False, False, True)] == [
        LISTEN,
        SPEAK,
        SPEAK,
        SPEAK,
        LISTEN,
        SPEAK,
    ]


def test_a_cancel_mutes_until_the_model_has_gone_quiet() -> None:
    speaking = Speaking(quiet_frames=2)
    assert speaking.observe(True) == SPEAK
    speaking.mute()
    # Still talking (a pause shorter than quiet_frames): muted.
    assert [speaking.observe(w) for w in (True, False, True, False)] == [LISTEN] * 4
    # Quiet long enough: the muted answer is over, and the next word speaks.
    assert speaking.observe(False) == LISTEN and not speaking.muted
    assert speaking.observe(True) == SPEAK


def test_a_cancel_of_a_quiet_model_mutes_nothing() -> None:
    speaking = Speaking(quiet_frames=2)
    speaking.mute()
    assert not speaking.muted
    assert speaking.observe(True) == SPEAK
