"""Text into a running row's context (`Stage0Context`): its tokens go into
that row's text stream in order, word by word at the model's pace, a word's
pieces on consecutive frames; the row is otherwise moshi's own loop given the
same text through the same hook; other rows are untouched; `ContextTaken`
names the frame that carries the last token; contexts queue in order; too
much is refused typed; a restart or a row's release drops what waits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from antiphon.stage0.backends.moshi.context import PAD_BUDGET
from antiphon.stage0.backends.moshi.lockstep import Lockstep
from antiphon.stage0.backends.moshi.session import DuplexSession
from antiphon.v1 import stage_pb2 as pb
from tests.stage0.duplex_reference import reference, tiny_lockstep, voice

pytestmark = pytest.mark.models

Tokens = list[tuple[int, list[int]]]
TEXT = "abc de f"


def spelled(lockstep: Lockstep) -> None:
    lockstep.model.text_of = lambda token: f"#{token}"


def context(id: str, text: str, epoch: int = 0) -> pb.Stage0Request:
    return pb.Stage0Request(context=pb.Stage0Context(epoch=epoch, id=id, text=text))


def opened(lockstep: Lockstep, events: list[pb.Stage0Event], name: str) -> DuplexSession:
    session = DuplexSession(lockstep, events.append)
    session.handle(pb.Stage0Request(open=pb.Stage0Open(session_id=name)))
    return session


def frames(events: list[pb.Stage0Event]) -> Tokens:
    got = [e.frame for e in events if e.WhichOneof("kind") == "frame"]
    assert [f.index for f in got] == list(range(len(got)))
    return [(int(f.text.removeprefix("#")), list(f.codes)) for f in got]


def kinds(events: list[pb.Stage0Event], kind: str) -> list[pb.Stage0Event]:
    return [e for e in events if e.WhichOneof("kind") == kind]


def forced_at(
    text: list[int], start: int, words: list[list[int]], pads: frozenset[int]
) -> Iterator[tuple[int, int]]:
    """(frame, token) where each of `words`' tokens went into `text`, checking
    the pacing: from frame `start`, a word's tokens on consecutive frames, and
    between words nothing but the model's padding, `PAD_BUDGET` frames at most."""
    at = start
    for w, word in enumerate(words):
        if w:
            gap = 0
            while text[at] in pads:
                at, gap = at + 1, gap + 1
            assert gap <= PAD_BUDGET, (w, gap)
        for token in word:
            assert text[at] == token, (at, text[at], token)
            yield at, token
            at += 1


def test_a_context_is_said_in_order_on_its_row_alone_and_taken_at_its_last_frame() -> None:
    lockstep = tiny_lockstep(3, torch.float32)
    spelled(lockstep)
    steps, told_at = 40, 5
    events: dict[str, list[pb.Stage0Event]] = {n: [] for n in ("a", "b", "c")}
    # a from the start, told at step 5; b joins at 3 and leaves at 20; c takes
    # a free row at 10.
    a = opened(lockstep, events["a"], "a")
    lockstep.hear(a.row, voice(1, steps))  # type: ignore[arg-type]
    sessions = {"a": a}
    for step in range(steps):
        if step == 3:
            sessions["b"] = opened(lockstep, events["b"], "b")
            lockstep.hear(sessions["b"].row, voice(2, 17))  # type: ignore[arg-type]
        if step == 10:
            sessions["c"] = opened(lockstep, events["c"], "c")
            lockstep.hear(sessions["c"].row, voice(3, 30))  # type: ignore[arg-type]
        if step == 20:
            lockstep.release(sessions["b"].row)  # type: ignore[arg-type]
        if step == told_at:
            a.handle(context("c1", TEXT))
        lockstep.step()
    # The others are what moshi's loop makes of their input alone.
    assert frames(events["b"]) == reference(voice(2, 17), 17, torch.float32)
    assert frames(events["c"]) == reference(voice(3, 30), 30, torch.float32)
    got = frames(events["a"])
    words = lockstep.model.words(TEXT)
    assert [len(w) for w in words] == [3, 2, 1]
    pads = lockstep.model.silent_ids
    # Frame j carries the text of the row's step j: the next step after the
    # context came is frame 5.
    placed = dict(forced_at([t for t, _ in got], told_at, words, pads))
    # Token for token (audio too) moshi's own loop forced there through its hook.
    assert got == reference(voice(1, steps), steps, torch.float32, text_at=placed)
    (taken,) = kinds(events["a"], "context_taken")
    assert (taken.context_taken.id, taken.context_taken.index) == ("c1", max(placed))
    assert not kinds(events["a"], "error")


def test_contexts_queue_in_order_and_each_is_taken_at_its_own_last_frame() -> None:
    lockstep = tiny_lockstep(2, torch.float32)
    spelled(lockstep)
    events: list[pb.Stage0Event] = []
    session = opened(lockstep, events, "s")
    for _ in range(3):
        lockstep.step()
    session.handle(context("first", "ab cd", epoch=1))
    session.handle(context("empty", "  ", epoch=1))
    session.handle(context("second", "efg", epoch=2))
    for _ in range(25):
        lockstep.step()
    text = [t for t, _ in frames(events)]
    words = lockstep.model.words("ab cd") + lockstep.model.words("efg")
    placed = sorted(forced_at(text, 3, words, lockstep.model.silent_ids))
    ends = [placed[3][0], placed[6][0]]
    taken = [e.context_taken for e in kinds(events, "context_taken")]
    assert [(t.id, t.epoch, t.index) for t in taken] == [
        ("first", 1, ends[0]),
        ("empty", 1, ends[0]),  # nothing of its own: in with what came before it
        ("second", 2, ends[1]),
    ]
    # Each is sent with the step that forced its last token, whose frame
    # comes out max_delay steps later.
    first = [e.WhichOneof("kind") for e in events].index("context_taken")
    assert len(frames(events[:first])) == ends[0] + 1 - lockstep.model.lm_gen.max_delay


def test_empty_text_on_an_empty_queue_is_taken_at_once_for_the_next_frame() -> None:
    lockstep = tiny_lockstep(1, torch.float32)
    events: list[pb.Stage0Event] = []
    session = opened(lockstep, events, "s")
    session.handle(context("now", ""))
    for _ in range(4):
        lockstep.step()
    session.handle(context("later", " \n"))
    taken = [(e.context_taken.id, e.context_taken.index) for e in kinds(events, "context_taken")]
    # The row has stepped 4 times: its next step makes frame 4 (3 are out).
    assert taken == [("now", 0), ("later", 4)]
    assert len(kinds(events, "frame")) == 4 - lockstep.model.lm_gen.max_delay


def test_more_than_the_limit_is_refused_typed_and_nothing_of_it_is_queued() -> None:
    lockstep = tiny_lockstep(1, torch.float32, context_tokens=6)
    events: list[pb.Stage0Event] = []
    session = opened(lockstep, events, "s")
    session.handle(context("fits", "abcd"))
    session.handle(context("over", "efg", epoch=3))
    row = session.row
    assert row is not None and row.context.queued == 4
    (error,) = kinds(events, "error")
    assert (error.error.code, error.error.response_id, error.error.epoch) == (
        "context_too_long",
        "over",
        3,
    )
    for _ in range(8):
        lockstep.step()
    assert [e.context_taken.id for e in kinds(events, "context_taken")] == ["fits"]


def test_a_restart_or_a_release_drops_what_waits_even_mid_step() -> None:
    lockstep = tiny_lockstep(2, torch.float32)
    events: list[pb.Stage0Event] = []
    session = opened(lockstep, events, "s")
    row = session.row
    assert row is not None
    session.handle(context("dropped", "abcdefgh"))
    lockstep.step()
    # A restart while a step that forced its token runs: that step settles nothing.
    batch = lockstep.gather()
    lockstep.restart(row)
    lockstep.deliver(batch, lockstep.compute(batch), late=False)
    assert not row.context and row.context.offer() is None
    session.handle(context("kept", "ab"))
    for _ in range(4):
        lockstep.step()
    assert [e.context_taken.id for e in kinds(events, "context_taken")] == ["kept"]
    session.handle(context("gone", "abcdef"))
    lockstep.release(row)
    lockstep.step()
    assert [e.context_taken.id for e in kinds(events, "context_taken")] == ["kept"]


def test_a_context_before_open_is_refused_with_its_id() -> None:
    lockstep = tiny_lockstep(1, torch.float32)
    events: list[pb.Stage0Event] = []
    DuplexSession(lockstep, events.append).handle(context("c", "hi"))
    (error,) = kinds(events, "error")
    assert (error.error.code, error.error.response_id) == ("not_open", "c")
