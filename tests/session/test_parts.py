"""The session actor's parts, alone: plain objects, no Redis, gRPC or sockets.

Each part returns or records what it would send, so these tests read the
decisions themselves: what a commit seals, which requests carry which
epoch, when a stream is replaced, when a response starts by itself.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from antiphon.common import stage_audio
from antiphon.session.actor.attachment import Attachment
from antiphon.session.actor.errors import Rejection
from antiphon.session.actor.journal import Emitter, Fields
from antiphon.session.config import policy, session_config
from antiphon.session.metrics import SessionMetrics
from antiphon.session.stage.stage_links import StageLinks, capabilities
from antiphon.session.state.store import NotOwnerError
from antiphon.session.user.input_buffer import InputBuffer, to_stage0
from antiphon.session.user.turns import Turns
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.support.bindings import Recording, recording_links


def tone(ms: int, rate: int) -> bytes:
    return b"\x10\x00" * (rate * ms // 1000)


# The cascade's stage0 rate; a model-native backend (Mimi) hears 24 kHz.
R = stage_audio.RATE


# ------------------------------------------------------------ input buffer
def test_appends_are_counted_at_stage0s_rate_whatever_the_clients() -> None:
    buffer = InputBuffer(limit_bytes=1 << 20)
    sent = buffer.accept(tone(200, 24000), 24000, R) + buffer.accept(tone(200, 24000), 24000, R)
    assert buffer.pending_bytes == len(sent)
    # The filter holds some back until the turn is sealed.
    assert 300 < buffer.pending_ms < 400
    assert len(sent + buffer.flush()) == 400 * stage_audio.BYTES_PER_MS
    buffer.clear()
    assert buffer.empty


def test_a_full_buffer_and_an_odd_rate_are_refused_before_anything_is_counted() -> None:
    buffer = InputBuffer(limit_bytes=100)
    buffer.accept(tone(20, 16000), 16000, R)
    with pytest.raises(Rejection) as full:
        buffer.accept(tone(20, 16000), 16000, R)
    assert (full.value.type, full.value.code) == ("rate_limit_error", "input_buffer_full")
    fresh = InputBuffer(limit_bytes=1 << 20)
    with pytest.raises(Rejection) as odd:
        fresh.accept(tone(20, 16000), 12345, R)
    assert (odd.value.code, odd.value.param) == ("unsupported_audio_format", "sample_rate_hz")
    assert fresh.empty


def test_a_model_native_backend_hears_its_own_rate_and_holds_nothing_for_a_limit() -> None:
    buffer = InputBuffer(limit_bytes=100)
    sent = b"".join(buffer.accept(tone(200, 16000), 16000, 24000, bounded=False) for _ in range(5))
    # 1 s at 16 kHz became 1 s at 24 kHz (less what the filter holds), far past the limit.
    assert len(sent + buffer.flush()) == 1000 * 48
    assert 900 < buffer.pending_ms <= 1000


def test_a_whole_item_is_resampled_with_nothing_held_back() -> None:
    assert len(to_stage0(tone(500, 48000), 48000, R)) == 500 * stage_audio.BYTES_PER_MS


# ------------------------------------------------------------------ turns
def test_a_sealed_audio_turn_is_pending_until_heard_then_done() -> None:
    turns = Turns("sess_1", last_item_id="item_prev", turn_id=3)
    turns.text_appended("and this")
    events = turns.seal_audio("item_new", epoch=2, deferred=True)
    assert [k for k, _ in events] == ["item_added", "item_created", "input_committed"]
    committed = cast(spb.InputCommitted, events[-1][1])
    assert (committed.previous_item_id, committed.item_id, committed.turn_id) == (
        "item_prev",
        "item_new",
        4,
    )
    assert committed.response_create_deferred and committed.history_len == 1
    assert turns.last_item_id == "item_new" and not turns.has_text
    heard = turns.heard("item_new", "hello there")
    assert heard is not None and not heard.created
    assert [k for k, _ in heard.events] == [
        "transcription_delta",
        "transcription_completed",
        "item_done",
    ]
    assert [p.type for p in heard.item.content] == ["input_audio", "input_text"]
    assert heard.item.content[0].transcript == "hello there"
    assert turns.heard("item_new", "again") is None  # heard once
    assert not turns.pending


def deltas(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.item_id, e.delta) for k, e in events if k == "transcription_delta"]


def partials(turns: Turns, *texts: str) -> list[tuple[str, str]]:
    out = []
    for text in texts:
        event = turns.partial(text)
        if event is not None:
            out += deltas([event])
    return out


def test_partial_transcripts_stream_their_growth_and_the_final_adds_the_rest() -> None:
    turns = Turns("sess_1")
    assert turns.partial("what") is None  # no speech is being heard
    _kind, started = turns.speech_started(0)
    item_id = cast(spb.SpeechStarted, started).item_id
    # Only growth goes out; a text that does not extend what was sent is no news.
    assert partials(turns, "What is", "What is", "What is the", "Who is", "What") == [
        (item_id, "What is"),
        (item_id, " the"),
    ]
    stopped = stage_pb2.VadSpeechStopped(audio_end_ms=900, speech_ms=800)
    assert turns.speech_stopped(stopped, cpb.TurnDetection())[0] == item_id
    assert turns.partial("What is the capital") is None  # the speech ended
    turns.seal_audio(item_id, epoch=0, deferred=False)
    heard = turns.heard(item_id, "What is the capital of France?")
    assert heard is not None
    kinds = [k for k, _ in heard.events]
    assert kinds == ["transcription_delta", "transcription_completed", "item_done"]
    assert deltas(heard.events) == [(item_id, " capital of France?")]


def test_a_final_pass_that_revised_a_streamed_word_adds_no_delta() -> None:
    turns = Turns("sess_1")
    item_id = cast(spb.SpeechStarted, turns.speech_started(0)[1]).item_id
    partials(turns, "What is the")
    turns.speech_stopped(stage_pb2.VadSpeechStopped(audio_end_ms=900), cpb.TurnDetection())
    turns.seal_audio(item_id, epoch=0, deferred=False)
    heard = turns.heard(item_id, "What's the capital?")
    assert heard is not None
    assert [k for k, _ in heard.events] == ["transcription_completed", "item_done"]


def test_a_native_utterance_takes_the_item_its_partials_went_out_under() -> None:
    """Its transcript may come after the next utterance started."""
    turns = Turns("sess_1")
    first = cast(spb.SpeechStarted, turns.speech_started(0)[1]).item_id
    assert partials(turns, "Hello there") == [(first, "Hello there")]
    turns.utterance_ended(1200)
    second = cast(spb.SpeechStarted, turns.speech_started(1500)[1]).item_id
    assert partials(turns, "And") == [(second, "And")]
    assert turns.utterance_item_id(1200) == first
    item, events = turns.seal_utterance(first, "Hello there, friend.", 0, deferred=False)
    assert item.id == first
    assert deltas(events) == [(first, ", friend.")]
    assert turns.utterance_item_id(1200) not in (first, second)  # taken once


def test_a_text_turn_is_complete_at_once_and_takes_the_next_turn_number() -> None:
    turns = Turns("sess_1", turn_id=1)
    turns.text_appended("two")
    turns.text_appended("words")
    item, events = turns.seal_text(epoch=0, deferred=False)
    assert item.content[0].text == "two words"
    assert [k for k, _ in events][-1] == "item_done"
    assert turns.turn_id == 2 and not turns.pending


def test_a_created_audio_item_goes_where_it_was_asked_once_heard() -> None:
    turns = Turns("sess_1", last_item_id="item_last")
    turns.expect_created(cpb.Item(id="item_c", type="message", role="user"), after="item_first")
    assert turns.last_item_id == "item_last"  # placed earlier: not the newest
    heard = turns.heard("item_c", "inserted")
    assert heard is not None and heard.created and heard.insert_after == "item_first"
    assert [k for k, _ in heard.events] == ["item_added", "item_created", "item_done"]


def test_speech_stopped_names_the_item_speech_started_announced() -> None:
    turns = Turns("sess_1")
    _, started = turns.speech_started(1200)
    announced = cast(spb.SpeechStarted, started).item_id
    td = cpb.TurnDetection(prefix_padding_ms=300, silence_duration_ms=500)
    item_id, speech_ms, _ = turns.speech_stopped(
        stage_pb2.VadSpeechStopped(audio_end_ms=3000, speech_ms=900), td
    )
    assert (item_id, speech_ms) == (announced, 900)
    # An older stage0 that does not say how long the user spoke: from the span.
    turns.speech_started(1200)
    _, speech_ms, _ = turns.speech_stopped(stage_pb2.VadSpeechStopped(audio_end_ms=3000), td)
    assert speech_ms == 3000 - 1200 - 300 - 500


# ----------------------------------------------------------------- policy
def _config(**patch: Any) -> cpb.SessionConfig:
    return session_config.merge(
        session_config.defaults(),
        cpb.SessionConfigPatch(**patch),
        max_output_tokens=256,
    )


def test_server_vad_answers_by_itself_and_barges_in_unless_told_otherwise() -> None:
    vad = _config()
    assert session_config.lane(vad) == stage_pb2.LANE_SERVER_VAD
    assert policy.auto_response(vad)
    assert policy.overlap_policy(vad) == policy.BARGE_IN
    quiet = _config(
        turn_detection=cpb.TurnDetection(
            mode=cpb.TURN_DETECTION_MODE_SERVER_VAD, interrupt_response=False
        ),
        has_turn_detection=True,
    )
    assert policy.overlap_policy(quiet) == policy.LISTEN_ONLY


def test_push_to_talk_needs_no_vad_and_never_answers_by_itself() -> None:
    manual = _config(has_turn_detection=True)
    assert session_config.lane(manual) == stage_pb2.LANE_MANUAL
    assert not policy.auto_response(manual)
    assert policy.stage0_open("s", manual).skip_vad


def test_a_response_may_lower_the_token_ceiling_never_raise_it() -> None:
    config = _config()
    low = policy.requested_options(config, spb.CreateResponse(max_output_tokens=10), 256)
    high = policy.requested_options(config, spb.CreateResponse(max_output_tokens=9999), 256)
    assert (low.max_output_tokens, high.max_output_tokens) == (10, 256)


# ------------------------------------------------------------- attachment
async def test_a_new_stream_replaces_the_old_which_is_told_and_ended() -> None:
    attachment = Attachment("sess_1", generation=0)
    first, gen1, replaced = attachment.attach(seq=5)
    assert (gen1, replaced) == (1, False)
    second, gen2, replaced = attachment.attach(seq=7)
    assert (gen2, replaced) == (2, True)
    told = first.get_nowait()
    assert told is not None and told.WhichOneof("kind") == "session_replaced"
    assert told.seq == 7 and first.get_nowait() is None
    assert not attachment.detach(gen1, 10, lambda g: None)  # an old stream's end
    assert attachment.detach(gen2, 10, lambda g: None)
    assert second.get_nowait() is None and attachment.detached


async def test_the_grace_timer_fires_only_for_a_session_nobody_came_back_to() -> None:
    attachment = Attachment("sess_1", generation=0)
    _, gen, _ = attachment.attach(seq=0)
    fired: list[int] = []
    attachment.detach(gen, 0.01, fired.append)
    await asyncio.sleep(0.05)
    assert fired == [gen] and attachment.expired(gen)
    attachment.detach(attachment.attach(seq=0)[1], 0.05, fired.append)
    attachment.attach(seq=0)  # resumed within the grace period
    await asyncio.sleep(0.1)
    assert fired == [gen]


# ------------------------------------------------------------ stage links
def _links(rebind: Any = None) -> tuple[StageLinks, Recording, Recording]:
    return recording_links("s", epoch=4, rebind=rebind)


def test_every_request_carries_the_current_epoch_and_a_cancel_fences_both() -> None:
    links, s0, s1 = _links()
    links.audio(b"\x00\x00")
    links.advance_epoch()
    links.commit("item_1")
    links.synthesize("resp_1", "hi")
    assert [r.audio.epoch for r in s0.sent if r.HasField("audio")] == [4]
    assert [r.cancel.epoch for r in s0.sent if r.HasField("cancel")] == [5]
    assert [r.commit.epoch for r in s0.sent if r.HasField("commit")] == [5]
    assert [r.WhichOneof("kind") for r in s1.sent] == ["cancel", "text"]
    assert s1.sent[-1].text.epoch == 5


async def test_a_lost_worker_is_replaced_and_the_session_opened_there_with_its_capabilities() -> (
    None
):
    replacement = Recording("w0:2")
    info = stage_pb2.StageInfo(
        capabilities=cpb.Capabilities(supports_barge_in=True, implementation_level="native")
    )
    asked: list[tuple[str, str]] = []

    async def rebind(stage: str, failed: str) -> tuple[Any, stage_pb2.StageInfo]:
        asked.append((stage, failed))
        return replacement, info

    links, _s0, _ = _links(rebind)
    assert not links.capabilities.supports_barge_in
    await links.replace("stage0", "w0:1")
    assert asked == [("stage0", "w0:1")]
    assert [r.WhichOneof("kind") for r in replacement.sent] == ["open"]
    assert links.capabilities.supports_barge_in  # the new worker's, not the old one's
    assert links.addresses()["stage0"] == "w0:2"


async def test_a_failed_rebind_leaves_the_stage_unbound_until_a_worker_takes_it() -> None:
    async def nobody(stage: str, failed: str) -> tuple[Any, stage_pb2.StageInfo]:
        raise RuntimeError("no worker")

    links, _, _ = _links(nobody)
    with pytest.raises(RuntimeError):
        await links.replace("stage1", "w1:1")
    assert links.unbound == {"stage1": "w1:1"}


async def test_given_back_stages_hold_nothing_and_come_back_fresh() -> None:
    fresh = [Recording("w0:9"), Recording("w1:9")]

    async def rebind(stage: str, failed: str) -> tuple[Any, stage_pb2.StageInfo]:
        return fresh[0 if stage == "stage0" else 1], stage_pb2.StageInfo()

    links, s0, s1 = _links(rebind)
    assert await links.release("stage0") and await links.release("stage1")
    assert s0.closed and s1.closed and not await links.release("stage0")
    links.audio(b"\x00\x00")  # dropped: nothing is held
    await links.bind_released()
    assert [r.WhichOneof("kind") for r in fresh[0].sent] == ["open"]
    assert links.held("stage0") and links.held("stage1")


def test_capabilities_take_truncation_from_the_voice_and_resume_from_the_session() -> None:
    info0 = stage_pb2.StageInfo(capabilities=cpb.Capabilities(supports_audio_truncate=True))
    info1 = stage_pb2.StageInfo(capabilities=cpb.Capabilities(supports_audio_truncate=False))
    caps = capabilities(info0, info1)
    assert not caps.supports_audio_truncate and caps.supports_session_resume


# ---------------------------------------------------------------- emitter
class ListJournal:
    """A journal in a list, each commit one round trip; refuses every write once `lost` is set."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, bytes]] = []
        self.round_trips: list[tuple[list[int], Fields | None]] = []
        self.lost = False

    async def commit(
        self,
        session_id: str,
        token: str,
        events: list[tuple[int, bytes]],
        fields: Fields | None = None,
    ) -> None:
        if self.lost:
            raise NotOwnerError(session_id)
        self.entries += events
        self.round_trips.append(([seq for seq, _ in events], fields))


async def test_events_are_held_journaled_in_one_trip_then_sent_and_refused_ones_never_leave() -> (
    None
):
    journal, attachment, stood_down = ListJournal(), Attachment("sess_1", 0), []
    outbound, _, _ = attachment.attach(seq=0)
    emitter = Emitter(
        journal=journal,
        session_id="sess_1",
        owner_token="own_1",
        seq=41,
        attachment=attachment,
        metrics=SessionMetrics(CollectorRegistry()),
        on_not_owner=lambda: stood_down.append(True),
    )
    await emitter.emit_all(
        [("heartbeat_ack", spb.HeartbeatAck()), ("input_cleared", spb.InputCleared())]
    )
    # Numbered, but neither journaled nor sent before the flush.
    assert emitter.seq == 43 and journal.entries == [] and outbound.empty()
    await emitter.flush({"epoch": "2"})
    assert journal.round_trips == [([42, 43], {"epoch": "2"})]
    sent = [outbound.get_nowait() for _ in range(2)]
    assert [e.seq for e in sent if e is not None] == [42, 43]
    assert emitter.journaled_seq == 43
    await emitter.flush()  # nothing held, nothing changed: no round trip
    assert len(journal.round_trips) == 1
    journal.lost = True
    await emitter.emit("input_cleared", spb.InputCleared())
    with pytest.raises(NotOwnerError):
        await emitter.flush()
    assert stood_down == [True] and emitter.journaled_seq == 43 and outbound.empty()
    assert emitter.drop_held() == 1 and emitter.seq == 43


async def test_unbatched_each_event_is_a_round_trip_of_its_own_the_snapshot_with_the_last() -> None:
    journal, attachment = ListJournal(), Attachment("sess_1", 0)
    outbound, _, _ = attachment.attach(seq=0)
    emitter = Emitter(
        journal=journal,
        session_id="sess_1",
        owner_token="own_1",
        seq=0,
        attachment=attachment,
        metrics=SessionMetrics(CollectorRegistry()),
        on_not_owner=lambda: None,
        batched=False,
    )
    await emitter.emit_all(
        [("heartbeat_ack", spb.HeartbeatAck()), ("input_cleared", spb.InputCleared())]
    )
    await emitter.flush({"epoch": "1"})
    assert journal.round_trips == [([1], None), ([2], {"epoch": "1"})]
    assert [e.seq for e in (outbound.get_nowait(), outbound.get_nowait()) if e] == [1, 2]
    assert emitter.journaled_seq == 2
