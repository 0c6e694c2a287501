"""`cancel_response` (synthesis.py): one response dropped alone (a preemptive
answer the session discarded): nothing more of its audio and no `done`,
while the epoch and every other response go on. The real session, scheduler
and voice thread; the voice is the `synthetic` backend, or a scripted one at
the same boundary to hold a clause on the voice thread."""

from __future__ import annotations

from antiphon.v1 import stage_pb2 as pb
from tests.stage1.speaking import Heard, Speaker, text
from tests.stage1.test_synthesis import ScriptedVoice, synthetic


def cancel_response(response_id: str) -> pb.Stage1Request:
    return pb.Stage1Request(cancel_response=pb.StageCancelResponse(response_id=response_id))


def kinds_of(heard: Heard, response_id: str) -> list[str]:
    return [
        kind
        for e in heard.events
        if (kind := e.WhichOneof("kind") or "") and getattr(e, kind).response_id == response_id
    ]


async def test_a_cancelled_response_being_spoken_says_no_more_and_the_queued_one_is_spoken(
    speaker: Speaker, heard: Heard
) -> None:
    voice = ScriptedVoice(held=True)
    session = speaker(voice)
    session.handle(text("pre", "One thing here. Two things here. Three.", epoch=2, final=True))
    session.handle(text("resp", "Something else.", epoch=2, final=True))
    await voice.speaking.wait()  # "One thing here." is on the voice thread
    session.handle(cancel_response("pre"))
    voice.release()
    done = await heard.done("resp")
    assert (done.epoch, done.response_id) == (2, "resp")
    assert heard.texts("resp") == ["Something else."]
    # Not even the clause that was being spoken when the cancel came.
    assert kinds_of(heard, "pre") == []
    assert voice.asked == ["One thing here.", "Something else."]
    assert [d.response_id for d in heard.dones] == ["resp"]


async def test_a_cancelled_response_still_streaming_gets_no_done(
    speaker: Speaker, heard: Heard
) -> None:
    """Its text is not final yet: no `final` will come for it, and none is needed."""
    voice = ScriptedVoice(held=True)
    session = speaker(voice)
    session.handle(text("pre", "First clause here. And then", epoch=1))
    session.handle(text("resp", "The other answer.", epoch=1, final=True))
    await voice.speaking.wait()
    session.handle(cancel_response("pre"))
    voice.release()
    await heard.done("resp")
    assert kinds_of(heard, "pre") == []
    assert heard.texts("resp") == ["The other answer."]
    # The epoch was not advanced: a later response of it is spoken and done.
    session.handle(text("next", "And one more.", epoch=1, final=True))
    await heard.done("next")
    assert heard.texts("next") == ["And one more."]
    assert [d.response_id for d in heard.dones] == ["resp", "next"]


async def test_cancelling_a_response_that_had_no_text_changes_nothing(
    speaker: Speaker, heard: Heard
) -> None:
    session = speaker(synthetic())
    session.handle(cancel_response("never"))
    session.handle(text("resp", "Hello there.", final=True))
    await heard.done("resp")
    assert heard.texts("resp") == ["Hello there."]
    assert heard.errors == []


async def test_cancelling_a_response_already_done_leaves_the_next_of_its_id_alone(
    speaker: Speaker, heard: Heard
) -> None:
    session = speaker(synthetic())
    session.handle(text("r1", "Said and done.", final=True))
    await heard.done("r1")
    session.handle(cancel_response("r1"))  # late: it is over
    session.handle(text("r2", "Next.", final=True))
    await heard.done("r2")
    assert [d.response_id for d in heard.dones] == ["r1", "r2"]


async def test_a_cancelled_response_whose_clauses_all_wait_is_never_spoken(
    speaker: Speaker, heard: Heard
) -> None:
    """Queued behind another response's clause: none of it reaches the voice."""
    voice = ScriptedVoice(held=True)
    session = speaker(voice)
    session.handle(text("first", "Hold on.", final=True))
    await voice.speaking.wait()
    session.handle(text("pre", "Never said. Not this either.", final=True))
    session.handle(text("last", "But this.", final=True))
    session.handle(cancel_response("pre"))
    voice.release()
    await heard.done("last")
    assert voice.asked == ["Hold on.", "But this."]
    assert kinds_of(heard, "pre") == []
    assert [d.response_id for d in heard.dones] == ["first", "last"]
