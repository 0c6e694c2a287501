"""Preemptive answers: asked for at the user's first pause, held out of sight,
taken over by the turn's response when its request is the same, dropped on
both stages otherwise. A real actor over a real Redis in the server_vad
lane (the default: auto response); the stage workers are recordings."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from antiphon.session.actor import mail
from antiphon.session.assistant.preemption import MAX_HELD
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.session.harness import Session, session

DB = 12  # this module's own database on the shared test Redis

PREEMPTIVE = "antiphon_session_preemptive_answers_total"
SAID = "What is two plus two?"
# What a client may see of a response: none of it before the turn ends.
RESPONSE_KINDS = {
    "response_created",
    "output_item_added",
    "content_part_added",
    "response_speak",
    "audio_delta",
    "audio_transcript_delta",
    "text_delta",
    "audio_done",
    "audio_transcript_done",
    "text_done",
    "content_part_done",
    "output_item_done",
    "response_done",
    "item_added",
    "item_created",
    "item_done",
}
# Those that name the response they are of.
OF_A_RESPONSE = RESPONSE_KINDS - {"item_added", "item_created", "item_done"}


def speech(ms: int, rate: int = 24000) -> spb.AppendAudio:
    return spb.AppendAudio(pcm16=b"\x10\x00" * (rate * ms // 1000), sample_rate_hz=rate)


def delta(rid: str, text: str) -> stage_pb2.GenerationDelta:
    return stage_pb2.GenerationDelta(response_id=rid, text=text)


def chunk(rid: str, text: str) -> stage_pb2.AudioChunk:
    return stage_pb2.AudioChunk(
        response_id=rid,
        pcm16=b"\x01\x00" * 240,
        sample_rate_hz=24000,
        text=text,
        duration_ms=10,
    )


def count(s: Session, outcome: str) -> float:
    return s.count(PREEMPTIVE, outcome=outcome)


def texts1(s: Session) -> list[tuple[str, str, bool]]:
    """What stage1 was asked to say: (response id, text, final)."""
    return [(t.response_id, t.text, t.final) for t in s.sent1("text")]


def audio_texts(events: list[spb.ServerEvent]) -> list[str]:
    return [e.audio_transcript_delta.delta for e in events if e.HasField("audio_transcript_delta")]


async def speaking(s: Session) -> None:
    """Attached, the user speaking (server VAD heard its start)."""
    await s.attach()
    s.events()
    await s.command(append_audio=speech(600))
    await s.stage0(speech_started=stage_pb2.VadSpeechStarted(audio_start_ms=100))
    s.events()


async def paused(s: Session, said: str = SAID) -> str:
    """The user paused with `said`: the preemptive answer's id."""
    await s.stage0(pause=stage_pb2.UtterancePause(audio_end_ms=1200, transcript=said))
    (generate,) = s.sent0("generate")
    return str(generate.response_id)


@contextlib.asynccontextmanager
async def held(redis_url: str) -> AsyncIterator[tuple[Session, str]]:
    """A session whose user paused having said SAID, and its preemptive answer's id."""
    async with session(redis_url, DB) as s:
        await speaking(s)
        yield s, await paused(s)


async def turn_ends(s: Session, said: str = SAID) -> list[spb.ServerEvent]:
    """Server VAD ends the turn, and stage0 hears it as `said`: the client's events."""
    await s.stage0(speech_stopped=stage_pb2.VadSpeechStopped(audio_end_ms=1400, speech_ms=900))
    (commit,) = s.sent0("commit")
    await s.stage0(transcript=stage_pb2.Transcript(item_id=commit.item_id, text=said))
    return s.events()


def kinds(events: list[spb.ServerEvent]) -> list[str]:
    return [e.WhichOneof("kind") or "" for e in events]


def response_id_of(event: spb.ServerEvent) -> str:
    kind = event.WhichOneof("kind") or ""
    msg: Any = getattr(event, kind)
    if kind in ("response_created", "response_done"):
        return str(msg.response.id)
    if kind in ("output_item_added", "output_item_done"):
        return str(msg.response_id)
    return str(msg.ref.response_id)


# ----------------------------------------------------------- asked, held
async def test_a_pause_asks_for_the_answer_at_once_and_nothing_of_it_is_seen(
    redis_url: str,
) -> None:
    async with held(redis_url) as (s, pre):
        assert pre.startswith("pre")
        (generate,) = s.sent0("generate")
        assert (generate.messages[-1].role, generate.messages[-1].content) == ("user", SAID)
        assert generate.messages[0].role == "system"
        assert count(s, "started") == 1
        await s.stage0(delta=delta(pre, "Two plus two"))
        await s.stage0(delta=delta(pre, " is four."))
        await s.stage0(done=stage_pb2.GenerationDone(response_id=pre))
        await s.stage1(audio=chunk(pre, "Two plus two"))
        await s.stage1(done=stage_pb2.SynthesisDone(response_id=pre))
        assert RESPONSE_KINDS.isdisjoint(kinds(s.events()))
        # Spoken as it comes, under the answer's own id; its end waits for the turn's.
        assert texts1(s) == [(pre, "Two plus two", False), (pre, " is four.", False)]
        assert await s.history() == []


# ----------------------------------------------------------------- used
async def test_the_turn_ending_as_the_pause_said_takes_the_answer_over(
    redis_url: str,
) -> None:
    async with held(redis_url) as (s, pre):
        await s.stage0(delta=delta(pre, "Two plus two"))
        await s.stage1(audio=chunk(pre, "Two plus two"))
        await s.stage0(delta=delta(pre, " is"))
        await s.stage1(audio=chunk(pre, " is"))
        s.events()
        events = await turn_ends(s)
        assert len(s.sent0("generate")) == 1  # no second ask
        assert count(s, "used") == 1
        (created,) = [e for e in events if e.HasField("response_created")]
        rid = created.response_created.response.id
        assert rid.startswith("resp") and rid != pre
        assert {response_id_of(e) for e in events if kinds([e])[0] in OF_A_RESPONSE} == {rid}
        # What was held comes out as the response's own, in order, after the
        # user's turn is complete.
        assert audio_texts(events) == ["Two plus two", " is"]
        got = kinds(events)
        assert got.count("audio_delta") == 2
        assert got.index("transcription_completed") < got.index("audio_delta")
        # The deltas went to stage1 once, when they came; not again.
        assert texts1(s) == [(pre, "Two plus two", False), (pre, " is", False)]

        # The rest flows as it comes, under the pre id on the stages.
        await s.stage0(delta=delta(pre, " four."))
        assert texts1(s)[-1] == (pre, " four.", False)
        await s.stage1(audio=chunk(pre, " four."))
        await s.stage0(done=stage_pb2.GenerationDone(response_id=pre))
        assert texts1(s)[-1] == (pre, "", True)
        await s.stage1(done=stage_pb2.SynthesisDone(response_id=pre))
        events = s.events()
        assert audio_texts(events) == [" four."]
        (done,) = [e.response_done.response for e in events if e.HasField("response_done")]
        assert (done.id, done.status) == (rid, "completed")
        assert {response_id_of(e) for e in events if kinds([e])[0] in OF_A_RESPONSE} == {rid}
        user, assistant = await s.history()
        assert user.content[0].transcript == SAID
        assert assistant.content[0].transcript == "Two plus two is four."
        assert count(s, "mismatch") == 0


async def test_a_held_done_is_replayed_and_the_final_text_goes_under_the_pre_id(
    redis_url: str,
) -> None:
    async with held(redis_url) as (s, pre):
        await s.stage0(delta=delta(pre, "Four."))
        await s.stage0(done=stage_pb2.GenerationDone(response_id=pre))
        await s.stage1(audio=chunk(pre, "Four."))
        assert (pre, "", True) not in texts1(s)  # the end waits for the turn's
        events = await turn_ends(s)
        assert audio_texts(events) == ["Four."]
        assert texts1(s) == [(pre, "Four.", False), (pre, "", True)]
        await s.stage1(done=stage_pb2.SynthesisDone(response_id=pre))
        (done,) = [e.response_done.response for e in s.events() if e.HasField("response_done")]
        assert done.status == "completed" and done.id.startswith("resp")


async def test_the_next_turn_is_preempted_with_the_answer_before_it_in_the_prompt(
    redis_url: str,
) -> None:
    async with held(redis_url) as (s, pre):
        await s.stage0(delta=delta(pre, "Four."))
        await s.stage0(done=stage_pb2.GenerationDone(response_id=pre))
        await turn_ends(s)
        await s.stage1(audio=chunk(pre, "Four."))
        await s.stage1(done=stage_pb2.SynthesisDone(response_id=pre))
        assert "response_done" in kinds(s.events())
        # The second turn.
        await s.command(append_audio=speech(600))
        await s.stage0(speech_started=stage_pb2.VadSpeechStarted(audio_start_ms=2000))
        await s.stage0(pause=stage_pb2.UtterancePause(audio_end_ms=2600, transcript="And 3+3?"))
        _, second = s.sent0("generate")
        assert second.response_id.startswith("pre") and second.response_id != pre
        assert [(m.role, m.content) for m in second.messages][1:] == [
            ("user", SAID),
            ("assistant", "Four."),
            ("user", "And 3+3?"),
        ]
        await s.stage0(speech_stopped=stage_pb2.VadSpeechStopped(audio_end_ms=2900, speech_ms=500))
        _, commit = s.sent0("commit")
        await s.stage0(transcript=stage_pb2.Transcript(item_id=commit.item_id, text="And 3+3?"))
        assert len(s.sent0("generate")) == 2
        assert count(s, "used") == 2 and count(s, "started") == 2


async def test_in_the_native_lane_the_utterance_takes_it_over(redis_url: str) -> None:
    """A cascade heard in the native lane: stage0 ends the turn itself (`utterance`)."""
    async with session(redis_url, DB, patch=cpb.SessionConfigPatch(native_duplex=True)) as s:
        await speaking(s)
        assert s.workers.now("stage0").sent[0].open.preemptive
        pre = await paused(s)
        await s.stage0(delta=delta(pre, "Four."))
        await s.stage1(audio=chunk(pre, "Four."))
        assert s.events() == []
        await s.stage0(
            utterance=stage_pb2.Utterance(
                transcript=SAID, audio_end_ms=1400, decision=stage_pb2.DECISION_SPEAK
            )
        )
        events = s.events()
        assert len(s.sent0("generate")) == 1 and count(s, "used") == 1
        assert audio_texts(events) == ["Four."]
        (created,) = [e for e in events if e.HasField("response_created")]
        rid = created.response_created.response.id
        assert {response_id_of(e) for e in events if kinds([e])[0] in OF_A_RESPONSE} == {rid}


# -------------------------------------------------------------- dropped
async def test_speech_resuming_drops_it_on_both_stages(redis_url: str) -> None:
    async with held(redis_url) as (s, pre):
        await s.stage0(delta=delta(pre, "Four."))
        await s.stage0(resumed=stage_pb2.SpeechResumed(audio_start_ms=1300))
        assert [c.response_id for c in s.sent0("cancel_response")] == [pre]
        assert [c.response_id for c in s.sent1("cancel_response")] == [pre]
        assert count(s, "speech_resumed") == 1
        assert s.sent0("cancel") == []  # the epoch stays
        await s.stage0(delta=delta(pre, " Late."))
        assert RESPONSE_KINDS.isdisjoint(kinds(s.events()))
        events = await turn_ends(s, "What is two plus two, and three?")
        generates = s.sent0("generate")
        assert len(generates) == 2
        (created,) = [e for e in events if e.HasField("response_created")]
        assert generates[1].response_id == created.response_created.response.id
        assert generates[1].messages[-1].content == "What is two plus two, and three?"
        assert count(s, "used") == 0


async def test_another_transcript_drops_it_and_nothing_of_it_reaches_the_client(
    redis_url: str,
) -> None:
    async with held(redis_url) as (s, pre):
        await s.stage0(delta=delta(pre, "Four."))
        events = await turn_ends(s, "What is two plus three?")
        assert count(s, "mismatch") == 1 and count(s, "used") == 0
        assert [c.response_id for c in s.sent0("cancel_response")] == [pre]
        assert [c.response_id for c in s.sent1("cancel_response")] == [pre]
        _, second = s.sent0("generate")
        (created,) = [e for e in events if e.HasField("response_created")]
        rid = created.response_created.response.id
        assert second.response_id == rid
        assert second.messages[-1].content == "What is two plus three?"
        assert audio_texts(events) == []
        # What the stages still send of the dropped answer is for nobody.
        await s.stage0(delta=delta(pre, " Late four."))
        await s.stage1(audio=chunk(pre, "Four."))
        await s.stage0(done=stage_pb2.GenerationDone(response_id=pre))
        await s.stage1(done=stage_pb2.SynthesisDone(response_id=pre))
        assert s.events() == []
        assert (pre, " Late four.", False) not in texts1(s)
        # The turn's own answer is the one heard.
        await s.stage0(delta=delta(rid, "Five."))
        await s.stage1(audio=chunk(rid, "Five."))
        assert audio_texts(s.events()) == ["Five."]


async def test_new_speech_drops_an_answer_still_held(redis_url: str) -> None:
    async with held(redis_url) as (s, pre):
        await s.stage0(speech_started=stage_pb2.VadSpeechStarted(audio_start_ms=1500))
        assert count(s, "speech_started") == 1
        assert [c.response_id for c in s.sent0("cancel_response")] == [pre]


async def test_an_answer_that_failed_while_held_is_dropped_at_the_turns_end(
    redis_url: str,
) -> None:
    async with held(redis_url) as (s, pre):
        await s.stage0(error=stage_pb2.StageError(response_id=pre, code="llm_error"))
        assert s.events() == []  # held: the client never asked for it
        events = await turn_ends(s)
        assert count(s, "failed") == 1
        assert [e.error.code for e in events if e.HasField("error")] == []
        _, generate = s.sent0("generate")
        (created,) = [e for e in events if e.HasField("response_created")]
        assert generate.response_id == created.response_created.response.id


async def test_a_lost_worker_drops_it(redis_url: str) -> None:
    async with held(redis_url) as (s, pre):
        await s.lose("stage1")
        assert count(s, "worker_lost") == 1
        assert [c.response_id for c in s.sent0("cancel_response")] == [pre]
        await s.stage1(audio=chunk(pre, "Four."))
        assert audio_texts(s.events()) == []


# ------------------------------------------------------------ not asked
async def test_a_pause_while_a_response_is_active_asks_for_nothing(redis_url: str) -> None:
    async with session(redis_url, DB) as s:
        await s.attach()
        await s.command(create_response=spb.CreateResponse())
        s.events()
        assert len(s.sent0("generate")) == 1
        await s.stage0(pause=stage_pb2.UtterancePause(audio_end_ms=1200, transcript=SAID))
        assert len(s.sent0("generate")) == 1
        assert count(s, "started") == 0
        assert count(s, "not_wanted") == 1
        assert s.events() == []


async def test_a_pause_while_a_turn_is_still_to_hear_asks_for_nothing(redis_url: str) -> None:
    async with session(redis_url, DB) as s:
        await speaking(s)
        await s.stage0(speech_stopped=stage_pb2.VadSpeechStopped(audio_end_ms=1400, speech_ms=900))
        s.events()
        # The answer to the committed turn waits for its transcript; a pause
        # of the next utterance is not answered before it.
        await s.command(append_audio=speech(400))
        await s.stage0(speech_started=stage_pb2.VadSpeechStarted(audio_start_ms=1600))
        await s.stage0(pause=stage_pb2.UtterancePause(audio_end_ms=2200, transcript=SAID))
        assert s.sent0("generate") == [] and count(s, "started") == 0


async def test_a_pause_when_the_session_does_not_answer_by_itself_asks_for_nothing(
    redis_url: str,
) -> None:
    no_auto = cpb.SessionConfigPatch(
        turn_detection=cpb.TurnDetection(
            mode=cpb.TURN_DETECTION_MODE_SERVER_VAD, create_response=False
        ),
        has_turn_detection=True,
    )
    async with session(redis_url, DB, patch=no_auto) as s:
        await speaking(s)
        await s.stage0(pause=stage_pb2.UtterancePause(audio_end_ms=1200, transcript=SAID))
        assert s.sent0("generate") == []
        assert count(s, "started") == 0
        assert not s.workers.now("stage0").sent[0].open.preemptive


async def test_a_pause_of_no_words_asks_for_nothing(redis_url: str) -> None:
    async with session(redis_url, DB) as s:
        await speaking(s)
        await s.stage0(pause=stage_pb2.UtterancePause(audio_end_ms=1200, transcript="  "))
        assert s.sent0("generate") == []
        assert s.workers.now("stage0").sent[0].open.preemptive  # it asked for pauses


async def test_clearing_the_input_drops_it(redis_url: str) -> None:
    async with held(redis_url) as (s, pre):
        await s.command(clear_input=spb.ClearInput())
        assert count(s, "input_cleared") == 1
        assert [c.response_id for c in s.sent0("cancel_response")] == [pre]


async def test_a_response_the_client_asks_for_meanwhile_does_not_take_it(redis_url: str) -> None:
    """Its prompt has no words of the turn still being spoken: not the same request."""
    async with held(redis_url) as (s, pre):
        await s.command(create_response=spb.CreateResponse())
        assert count(s, "mismatch") == 1
        _, generate = s.sent0("generate")
        (created,) = [e for e in s.events() if e.HasField("response_created")]
        assert generate.response_id == created.response_created.response.id != pre
        assert [m.role for m in generate.messages] == ["system"]


async def test_detaching_drops_it(redis_url: str) -> None:
    async with held(redis_url) as (s, pre):
        await s.actor.handle(mail.Detached(s.generation))
        assert count(s, "closed") == 1
        assert [c.response_id for c in s.sent0("cancel_response")] == [pre]
        assert [c.response_id for c in s.sent1("cancel_response")] == [pre]


async def test_an_answer_held_too_long_is_dropped(redis_url: str) -> None:
    async with held(redis_url) as (s, pre):
        for _ in range(MAX_HELD):
            await s.stage1(audio=chunk(pre, "."))
        assert count(s, "overflow") == 0
        await s.stage1(audio=chunk(pre, "."))
        assert count(s, "overflow") == 1
        assert [c.response_id for c in s.sent0("cancel_response")] == [pre]
        events = await turn_ends(s)
        assert audio_texts(events) == []
        _, generate = s.sent0("generate")
        (created,) = [e for e in events if e.HasField("response_created")]
        assert generate.response_id == created.response_created.response.id
