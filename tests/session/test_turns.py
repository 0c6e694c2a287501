"""`Turns` is told what happened and keeps the facts: which item is newest,
which turns stage0 owes a transcript, the text waiting for a commit."""

from __future__ import annotations

from antiphon.session.user.turns import Turns
from antiphon.v1 import common_pb2 as cpb


def test_an_answer_that_ended_is_newest_only_if_nothing_came_after_it() -> None:
    turns = Turns("s", last_item_id="item_user")
    turns.item_added("item_resp")  # the response's item takes its place
    turns.response_ended("item_resp", "item_call")
    assert turns.last_item_id == "item_call"
    turns.item_added("item_resp2")
    turns.item_added("item_next")  # a turn came while it was said
    turns.response_ended("item_resp2", "item_user")
    assert turns.last_item_id == "item_next"


def test_deleting_the_newest_item_names_the_new_newest() -> None:
    turns = Turns("s", last_item_id="item_b")
    turns.newest_deleted("item_a")
    assert turns.last_item_id == "item_a"


def test_turns_owed_by_a_dead_stage0_are_forgotten_and_never_heard() -> None:
    turns = Turns("s")
    turns.seal_audio("item_1", epoch=0, deferred=False)
    turns.expect_created(cpb.Item(id="item_c", type="message", role="user"), after=None)
    assert turns.pending == 2 and turns.last_item_id == "item_c"
    turns.transcripts_lost()
    assert turns.pending == 0
    assert turns.heard("item_1", "late") is None


def test_cleared_input_takes_its_text_with_it() -> None:
    turns = Turns("s")
    turns.text_appended("never")
    turns.input_cleared()
    assert not turns.has_text
    turns.text_appended("kept")
    item, _ = turns.seal_text(epoch=0, deferred=False)
    assert item.content[0].text == "kept" and not turns.has_text
