"""Listening: the user's input from the first append to a sealed, heard turn.

Commands and stage0's news go through a real actor over a real Redis (the
stage workers are recordings): what a commit seals and sends to stage0,
what a transcript completes, what server VAD's speech events decide, and
what is refused before anything changes."""

from __future__ import annotations

from antiphon.common import stage_audio
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.session.harness import MANUAL, Session, Workers, session

DB = 10  # this module's own database on the shared test Redis


def speech(ms: int, rate: int = 24000) -> spb.AppendAudio:
    return spb.AppendAudio(pcm16=b"\x10\x00" * (rate * ms // 1000), sample_rate_hz=rate)


async def commit_turn(s: Session) -> spb.InputCommitted:
    await s.command(append_audio=speech(200))
    await s.command(commit=spb.CommitInput())
    (committed,) = [e.input_committed for e in s.events() if e.HasField("input_committed")]
    return committed


async def test_a_commit_seals_the_audio_into_an_item_stage0_hears_then_it_is_done(
    redis_url: str,
) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        await s.command(append_audio=speech(200))
        await s.command(append_text=spb.AppendText(text="and this"))
        await s.command(commit=spb.CommitInput())
        assert s.kinds() == ["item_added", "item_created", "input_committed"]
        # Every byte went to stage0 at its rate, the filter's tail with the commit.
        sent = b"".join(a.pcm16 for a in s.sent0("audio"))
        assert len(sent) == 200 * stage_audio.BYTES_PER_MS
        (commit,) = s.sent0("commit")
        await s.stage0(transcript=stage_pb2.Transcript(item_id=commit.item_id, text="hello"))
        assert s.kinds() == ["transcription_delta", "transcription_completed", "item_done"]
        (item,) = await s.history()
        assert item.id == commit.item_id
        assert [(p.type, p.transcript or p.text) for p in item.content] == [
            ("input_audio", "hello"),
            ("input_text", "and this"),
        ]


async def test_the_next_turn_follows_the_last_one(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        first = await commit_turn(s)
        second = await commit_turn(s)
        assert second.previous_item_id == first.item_id
        assert (first.turn_id, second.turn_id) == (1, 2)


async def test_an_empty_commit_is_refused_and_sends_nothing(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        await s.command(commit=spb.CommitInput())
        (error,) = s.events()
        assert error.error.code == "input_audio_buffer_empty"
        assert s.sent0("commit") == []


async def test_a_declared_silence_makes_no_item_and_the_model_keeps_listening(
    redis_url: str,
) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        await s.command(append_audio=speech(100))
        await s.command(commit=spb.CommitInput(is_speech=False))
        committed, listen = s.events()
        assert committed.input_committed.item_id and not await s.history()
        assert listen.response_listen.reason == "silence_commit"
        assert len(s.sent0("clear_input")) == 1 and s.sent0("commit") == []


async def test_text_alone_is_a_turn_complete_at_once(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        await s.command(append_text=spb.AppendText(text="two"))
        await s.command(append_text=spb.AppendText(text="words"))
        await s.command(commit=spb.CommitInput())
        assert s.kinds()[-1] == "item_done"
        (item,) = await s.history()
        assert item.content[0].text == "two words"
        assert s.sent0("commit") == []  # nothing for stage0 to hear


async def test_turns_stage0_has_not_heard_yet_are_bounded(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL, max_pending_turns_per_session=2) as s:
        await s.attach()
        await commit_turn(s)
        await commit_turn(s)
        await s.command(append_audio=speech(100))
        await s.command(commit=spb.CommitInput())
        (error,) = [e.error for e in s.events() if e.HasField("error")]
        assert (error.type, error.code) == ("rate_limit_error", "too_many_pending_turns")
        assert len(s.sent0("commit")) == 2


async def test_cancelling_the_input_drops_its_text_and_fences_stage0(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        await s.command(append_text=spb.AppendText(text="never mind"))
        await s.command(cancel_input=spb.CancelInput())
        (cancelled,) = s.events()
        assert cancelled.input_cancelled.epoch == 1  # one past the epoch it opened in
        assert [c.epoch for c in s.sent0("cancel")] == [1]
        await s.command(commit=spb.CommitInput())
        assert s.events()[0].error.code == "input_audio_buffer_empty"


async def test_server_vad_ends_the_turn_and_answers_once_it_is_heard(redis_url: str) -> None:
    async with session(redis_url, DB) as s:  # the default lane: server VAD, auto answer
        await s.attach()
        s.events()
        await s.command(append_audio=speech(600))
        await s.stage0(speech_started=stage_pb2.VadSpeechStarted(audio_start_ms=100))
        (started,) = s.events()
        await s.stage0(speech_stopped=stage_pb2.VadSpeechStopped(audio_end_ms=1400, speech_ms=900))
        kinds = s.kinds()
        assert kinds[:4] == ["speech_stopped", "item_added", "item_created", "input_committed"]
        assert "response_created" in kinds
        (commit,) = s.sent0("commit")
        assert commit.item_id == started.speech_started.item_id
        # The answer waits for the turn's words: no generate before the transcript.
        assert s.sent0("generate") == []
        await s.stage0(transcript=stage_pb2.Transcript(item_id=commit.item_id, text="hi"))
        (generate,) = s.sent0("generate")
        assert [m.content for m in generate.messages][1:] == ["hi"]


async def test_a_short_remark_over_an_answer_is_acknowledged_not_a_turn(
    redis_url: str,
) -> None:
    no_barge_in = cpb.SessionConfigPatch(
        turn_detection=cpb.TurnDetection(
            mode=cpb.TURN_DETECTION_MODE_SERVER_VAD, interrupt_response=False
        ),
        has_turn_detection=True,
    )
    async with session(redis_url, DB, patch=no_barge_in) as s:
        await s.attach()
        await s.command(create_response=spb.CreateResponse())
        s.events()
        await s.command(append_audio=speech(300))
        await s.stage0(speech_stopped=stage_pb2.VadSpeechStopped(audio_end_ms=900, speech_ms=300))
        kinds = s.kinds()
        assert kinds == ["speech_stopped", "input_committed", "overlap_decision"]
        assert s.sent0("commit") == [] and not await s.history()


async def test_camera_frames_reach_a_stage0_that_consumes_them_and_no_other(
    redis_url: str,
) -> None:
    frame = b"\x89PNG\r\n\x1a\n" + bytes(32)
    append = speech(200)
    append.video_frames.append(frame)
    append.max_slice_nums = 2
    consuming = Workers(
        info0=stage_pb2.StageInfo(
            capabilities=cpb.Capabilities(model_native=True, consumes_video_frames=True)
        )
    )
    async with session(redis_url, DB, patch=MANUAL, workers=consuming) as s:
        await s.attach()
        await s.command(append_audio=append)
        (sent,) = s.sent0("audio")
        assert (list(sent.video_frames), sent.max_slice_nums) == ([frame], 2)
        assert sent.pcm16  # the frames ride the audio they came with
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        await s.command(append_audio=append)
        assert all(not a.video_frames for a in s.sent0("audio"))
