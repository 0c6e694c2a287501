"""The duplex lockstep batch: every row is its session's own model, token for
token what moshi's loop makes of that session's input alone, whoever else
joins, leaves or reuses a row, and however many contexts long the call runs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from prometheus_client import CollectorRegistry

from antiphon.stage0.backends.moshi.lockstep import Lockstep, NoFreeRowError
from antiphon.stage0.backends.moshi.rows import FRAME_BYTES, Row
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.v1 import stage_pb2 as pb
from tests.stage0.duplex_reference import reference, tiny_lockstep, voice

pytestmark = pytest.mark.models

Tokens = list[tuple[int, list[int]]]


def spelled(lockstep: Lockstep) -> None:
    """Frames' text says the token id itself (padding too), so a test reads ids back."""
    lockstep.model.text_of = lambda token: f"#{token}"


def collector(into: list[pb.ModelFrame]) -> Callable[[pb.Stage0Event], None]:
    def emit(event: pb.Stage0Event) -> None:
        assert event.WhichOneof("kind") == "frame"
        into.append(event.frame)

    return emit


def tokens(frames: list[pb.ModelFrame]) -> Tokens:
    return [(int(f.text.removeprefix("#")), list(f.codes)) for f in frames]


def run(lockstep: Lockstep, plan: dict[str, tuple[int, int, int]], steps: int) -> dict[str, Tokens]:
    """Each session (name: input kind, first step, step it leaves at) opens,
    sends its whole input at once and leaves as planned; what each was sent."""
    frames: dict[str, list[pb.ModelFrame]] = {name: [] for name in plan}
    rows: dict[str, Row] = {}
    for step in range(steps):
        for name, (kind, first, leaves) in plan.items():
            if step == leaves:
                lockstep.release(rows.pop(name))
            if step == first:
                rows[name] = lockstep.open(collector(frames[name]), name)
                lockstep.hear(rows[name], voice(kind, leaves - first))
        lockstep.step()
    for name, got in frames.items():
        assert [f.index for f in got] == list(range(len(got))), name
    return {name: tokens(got) for name, got in frames.items()}


def test_rows_match_the_reference_as_sessions_join_leave_and_reuse_rows() -> None:
    lockstep = tiny_lockstep(3, torch.float32)
    spelled(lockstep)
    # a from the start; b joins at 4 and leaves at 12; c joins at 6; d takes
    # b's row at 14 (its last owner gone two steps before); e at 20 in a's.
    plan = {
        "a": (0, 0, 18),
        "b": (1, 4, 12),
        "c": (2, 6, 40),
        "d": (3, 14, 40),
        "e": (4, 20, 40),
    }
    got = run(lockstep, plan, 40)
    expected = {
        name: reference(voice(kind, leaves - first), leaves - first, torch.float32)
        for name, (kind, first, leaves) in plan.items()
    }
    for name in plan:
        assert got[name] == expected[name], name
    # The inputs matter: no two sessions' answers are alike, so a row that
    # heard another's audio would show.
    answers = [tuple((t, tuple(c)) for t, c in expected[n]) for n in ("c", "d", "e")]
    assert len(set(answers)) == 3


def test_a_call_many_contexts_long_still_matches_the_reference() -> None:
    lockstep = tiny_lockstep(2, torch.float32)
    spelled(lockstep)
    attention = lockstep.model.lm_gen.lm_model.transformer.layers[0].self_attn
    assert getattr(attention, "context", None) == 16
    got = run(lockstep, {"long": (4, 0, 100), "other": (2, 30, 100)}, 100)
    assert got["long"] == reference(voice(4, 100), 100, torch.float32)
    assert got["other"] == reference(voice(2, 70), 70, torch.float32)
    assert len(got["long"]) == 100 - lockstep.model.lm_gen.max_delay


def test_a_row_reused_while_its_step_ran_gets_none_of_that_step() -> None:
    """A step's frame goes to the session the row served when the step began."""
    lockstep = tiny_lockstep(1, torch.float32)
    old: list[pb.ModelFrame] = []
    new: list[pb.ModelFrame] = []
    row = lockstep.open(collector(old))
    for _ in range(3):
        lockstep.step()
    batch = lockstep.gather()
    lockstep.release(row)
    lockstep.open(collector(new))
    lockstep.deliver(batch, lockstep.compute(batch), late=False)
    assert len(old) == 3 - lockstep.model.lm_gen.max_delay and new == []


def test_no_free_row_is_an_error_and_a_row_frees_when_its_session_leaves() -> None:
    registry = CollectorRegistry()
    lockstep = tiny_lockstep(2, torch.float32, metrics=Stage0Metrics(registry))
    first = lockstep.open(lambda e: None)
    lockstep.open(lambda e: None)
    assert registry.get_sample_value("antiphon_stage0_duplex_rows_active") == 2
    with pytest.raises(NoFreeRowError):
        lockstep.open(lambda e: None)
    lockstep.release(first)
    assert lockstep.open(lambda e: None).index == first.index


def test_a_row_short_of_a_frame_steps_on_silence_and_is_counted() -> None:
    registry = CollectorRegistry()
    lockstep = tiny_lockstep(3, torch.float32, metrics=Stage0Metrics(registry))
    fed = lockstep.open(lambda e: None)
    starved = lockstep.open(lambda e: None)
    lockstep.hear(fed, voice(1, 3))
    lockstep.hear(starved, voice(1, 1)[: FRAME_BYTES // 2])
    for _ in range(3):
        lockstep.step()
    # The free third row steps on silence too, uncounted: it serves nobody.
    assert registry.get_sample_value("antiphon_stage0_duplex_silence_frames_total") == 3
    # The half frame waits for the rest.
    assert starved.audio.buffered_ms == 40
    assert registry.get_sample_value("antiphon_stage0_duplex_step_seconds_count") == 3
