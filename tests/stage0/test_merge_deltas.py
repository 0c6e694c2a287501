"""responder.merge_deltas: text deltas of one response (same id, same epoch) fold into one
whose text is both; anything else stays a message of its own."""

from __future__ import annotations

from antiphon.stage0.backends.cascade.responder import merge_deltas
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb


def delta(text: str, response_id: str = "resp_1", epoch: int = 2) -> pb.Stage0Event:
    return pb.Stage0Event(delta=pb.GenerationDelta(epoch=epoch, response_id=response_id, text=text))


def test_deltas_of_one_response_become_one_with_both_texts_in_order() -> None:
    merged = merge_deltas(delta("You"), delta(" said"))
    assert merged == delta("You said")
    assert merge_deltas(merged, delta(":")) == delta("You said:")


def test_deltas_of_another_response_or_epoch_stay_apart() -> None:
    assert merge_deltas(delta("a"), delta("b", response_id="resp_2")) is None
    assert merge_deltas(delta("a"), delta("b", epoch=3)) is None


def test_no_other_event_merges() -> None:
    done = pb.Stage0Event(done=pb.GenerationDone(epoch=2, response_id="resp_1"))
    call = pb.Stage0Event(
        tool_call=pb.GenerationToolCall(epoch=2, response_id="resp_1", call=cpb.ToolCall(name="f"))
    )
    for other in (done, call):
        assert merge_deltas(delta("a"), other) is None
        assert merge_deltas(other, delta("a")) is None


def test_a_delta_holds_only_what_the_merge_merges() -> None:
    """A field added to GenerationDelta must be merged by merge_deltas too."""
    assert [f.name for f in pb.GenerationDelta.DESCRIPTOR.fields] == [
        "epoch",
        "response_id",
        "text",
    ]
