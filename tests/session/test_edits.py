"""The client's edits of the conversation and its playback reports, through a
real actor over a real Redis (the stage workers are recordings): where a
created item goes and what follows it, deletion of the newest item,
truncation to what was heard, and what is refused before anything changes."""

from __future__ import annotations

from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.session.harness import MANUAL, Session, Workers, session

DB = 0  # this module's own database on the shared test Redis


def text(item_id: str) -> cpb.Item:
    return cpb.Item(
        id=item_id,
        type="message",
        role="user",
        content=[cpb.ContentPart(type="input_text", text=item_id)],
    )


async def create(s: Session, item: cpb.Item, after: str | None = None) -> list[str]:
    req = spb.CreateItem(item=item)
    if after is not None:
        req.previous_item_id = after
    await s.command(create_item=req, client_type="conversation.item.create")
    return [e.WhichOneof("kind") or "" for e in s.events()]


async def ids(s: Session) -> list[str]:
    return [i.id for i in await s.history()]


async def next_turn_follows(s: Session) -> str:
    """The item the next committed turn names as its previous one."""
    await s.command(append_text=spb.AppendText(text="next"))
    await s.command(commit=spb.CommitInput())
    (committed,) = [e.input_committed for e in s.events() if e.HasField("input_committed")]
    return str(committed.previous_item_id)


async def test_an_item_created_last_is_the_one_the_next_turn_follows(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        assert await create(s, text("a")) == ["item_added", "item_created", "item_done"]
        assert await create(s, text("first"), after="") == [
            "item_added",
            "item_created",
            "item_done",
        ]
        assert await ids(s) == ["first", "a"]
        # Placed earlier, "first" is not the newest: "a" is.
        assert await next_turn_follows(s) == "a"
        assert s.actor.snapshot().last_item_id != "a"  # the turn is newest now


async def test_a_place_that_is_not_there_is_refused_and_changes_nothing(
    redis_url: str,
) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        assert await create(s, text("b"), after="missing") == ["error"]
        error = s.seen[-1].error
        assert (error.code, error.param) == ("item_not_found", "previous_item_id")
        assert await ids(s) == []


async def test_deleting_the_newest_item_makes_the_one_before_it_newest(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        await create(s, text("a"))
        await create(s, text("b"))
        await s.command(delete_item=spb.ItemRef(item_id="b"))
        assert [e.item_deleted.item_id for e in s.events()] == ["b"]
        assert s.actor.snapshot().last_item_id == "a"
        assert await next_turn_follows(s) == "a"
        await s.command(delete_item=spb.ItemRef(item_id="b"))
        assert s.events()[0].error.code == "item_not_found"


async def test_an_audio_item_is_heard_by_stage0_then_stored_where_asked(redis_url: str) -> None:
    audio = cpb.Item(
        type="message",
        role="user",
        content=[
            cpb.ContentPart(type="input_audio", audio=b"\x10\x00" * 2400, sample_rate_hz=24000)
        ],
    )
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        await create(s, text("a"))
        await s.command(append_audio=spb.AppendAudio(pcm16=b"\x10\x00" * 4800))
        assert await create(s, audio) == ["error"]  # the user's own input waits
        assert s.seen[-1].error.code == "input_audio_buffer_not_empty"
        await s.command(clear_input=spb.ClearInput())
        assert await create(s, audio, after="") == ["input_cleared"]
        (commit,) = s.sent0("commit")
        await s.stage0(transcript=stage_pb2.Transcript(item_id=commit.item_id, text="said"))
        assert [e.WhichOneof("kind") for e in s.events()] == [
            "item_added",
            "item_created",
            "item_done",
        ]
        assert await ids(s) == [commit.item_id, "a"]
        assert (await s.history())[0].content[0].transcript == "said"


async def test_truncation_needs_word_timings_and_keeps_only_the_words_heard(
    redis_url: str,
) -> None:
    truncating = stage_pb2.StageInfo(capabilities=cpb.Capabilities(supports_audio_truncate=True))
    async with session(redis_url, DB, patch=MANUAL, workers=Workers(info1=truncating)) as s:
        await s.attach()
        await s.command(create_response=spb.CreateResponse())
        (generate,) = s.sent0("generate")
        rid = generate.response_id
        item_id = f"item_{rid}"
        await s.stage0(delta=stage_pb2.GenerationDelta(response_id=rid, text="One two."))
        await s.stage0(done=stage_pb2.GenerationDone(response_id=rid))
        for word in ("One ", "two."):
            await s.stage1(
                audio=stage_pb2.AudioChunk(
                    response_id=rid,
                    pcm16=b"\x00\x00" * 4800,
                    sample_rate_hz=24000,
                    text=word,
                    duration_ms=200,
                )
            )
        await s.stage1(done=stage_pb2.SynthesisDone(response_id=rid))
        s.events()
        await s.command(
            truncate_item=spb.TruncateItem(item_id=item_id, audio_end_ms=900),
            client_type="conversation.item.truncate",
        )
        assert s.events()[0].error.param == "audio_end_ms"  # past what was sent
        await s.command(truncate_item=spb.TruncateItem(item_id=item_id, audio_end_ms=250))
        (truncated,) = s.events()
        assert truncated.item_truncated.transcript == "One"
        (stored,) = [i for i in await s.history() if i.id == item_id]
        assert stored.content[0].transcript == "One"


async def test_a_backend_without_word_timings_refuses_truncation(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        await s.command(
            truncate_item=spb.TruncateItem(item_id="item_x", audio_end_ms=10),
            client_type="conversation.item.truncate",
        )
        assert s.events()[0].error.code == "unsupported_capability"


async def test_a_playback_ack_for_no_response_of_the_session_is_refused(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        await s.command(playback_ack=spb.PlaybackAck(response_id="resp_nope", played_ms=10))
        assert s.events()[0].error.code == "response_not_found"
