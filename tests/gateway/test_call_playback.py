"""A WebRTC call's playback events around the real speaker track
(calls/call_socket.py): `output_audio_buffer.stopped` only once the speaker ran
dry *and* the response is done, and a barge-in in a gap between two sentences
still clears the answer and truncates it where the caller was."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from antiphon.gateway.calls.call_audio import SESSION_RATE
from antiphon.gateway.calls.call_socket import CallSocket
from antiphon.v1 import session_pb2 as spb

TONE = b"\x10\x27" * int(SESSION_RATE * 0.1)  # 100 ms, loud


def _delta(response_id: str, pcm16: bytes = TONE, session_ms: int = 0) -> spb.AudioDelta:
    return spb.AudioDelta(
        ref=spb.PartRef(response_id=response_id, item_id="item_" + response_id),
        audio=pcm16,
        audio_duration_ms=session_ms,
    )


def _done(response_id: str) -> str:
    return json.dumps({"type": "response.done", "response": {"id": response_id}})


def _said(call: CallSocket) -> list[dict[str, Any]]:
    # No data channel is open: what the call says waits in order for one.
    return [json.loads(text) for text in call._unsent]


def _kinds(call: CallSocket) -> list[str]:
    return [event["type"] for event in _said(call)]


async def _play_out(call: CallSocket) -> int:
    """The track's frames until the speaker ran dry, at the wall clock's pace."""
    frames = 0
    while call.speaker.playing:
        await call.speaker.recv()
        frames += 1
    return frames


async def _truncations(call: CallSocket) -> list[dict[str, Any]]:
    found = []
    while not call._inbox.empty():
        received = await call.receive()
        assert isinstance(received, Mapping)  # the client's events, not a microphone's audio
        event = json.loads(received["text"])
        if event["type"] == "conversation.item.truncate":
            found.append(event)
    return found


async def test_a_speaker_dry_between_sentences_says_stopped_only_after_response_done() -> None:
    call = CallSocket({}, media_timeout_s=5)
    call.play(_delta("resp_a"))
    assert await _play_out(call) == 5  # 100 ms in 20 ms frames
    assert _kinds(call) == ["output_audio_buffer.started"]  # the next sentence is coming

    call.play(_delta("resp_a"))
    await call.send("response.done", _done("resp_a"))
    assert _kinds(call)[-1] == "response.done"  # still playing the last sentence
    await _play_out(call)
    said = _said(call)
    assert [e["type"] for e in said] == [
        "output_audio_buffer.started",
        "response.done",
        "output_audio_buffer.stopped",
    ]
    assert said[-1]["response_id"] == "resp_a"


async def test_response_done_after_the_speaker_ran_dry_says_stopped_at_once() -> None:
    call = CallSocket({}, media_timeout_s=5)
    call.play(_delta("resp_a"))
    await _play_out(call)
    await call.send("response.done", _done("resp_other"))  # not this answer's
    assert _kinds(call)[-1] == "response.done"
    await call.send("response.done", _done("resp_a"))
    assert _kinds(call)[-2:] == ["response.done", "output_audio_buffer.stopped"]


async def test_a_barge_in_in_a_gap_clears_the_answer_and_truncates_what_was_heard() -> None:
    call = CallSocket({}, media_timeout_s=5)
    # The session counts whole ms a delta: its item may hold a little less
    # than the speaker played, and a truncate past it would be refused.
    call.play(_delta("resp_a", session_ms=98))
    await _play_out(call)  # 100 ms heard, then the voice is slow on the next sentence
    await call.send(
        "input_audio_buffer.speech_started", '{"type":"input_audio_buffer.speech_started"}'
    )
    said = _said(call)
    assert [e["type"] for e in said] == [
        "output_audio_buffer.started",
        "output_audio_buffer.cleared",
        "input_audio_buffer.speech_started",
    ]
    assert said[1]["response_id"] == "resp_a"
    # All it sent was heard, and the item is cut there: its text may be ahead.
    [truncate] = await _truncations(call)
    assert (truncate["item_id"], truncate["audio_end_ms"]) == ("item_resp_a", 98)

    # What the cut answer still sends is never played; the next answer is new.
    call.play(_delta("resp_a"))
    assert not call.speaker.playing
    call.play(_delta("resp_b"))
    started = _said(call)[-1]
    assert (started["type"], started["response_id"]) == ("output_audio_buffer.started", "resp_b")


async def test_a_barge_in_mid_sentence_truncates_the_item_where_playback_was() -> None:
    call = CallSocket({}, media_timeout_s=5)
    call.play(_delta("resp_a", TONE * 5))  # 500 ms queued
    for _ in range(10):  # 200 ms played
        await call.speaker.recv()
    await call.send(
        "input_audio_buffer.speech_started", '{"type":"input_audio_buffer.speech_started"}'
    )
    assert not call.speaker.playing
    [truncate] = await _truncations(call)
    assert truncate["item_id"] == "item_resp_a"
    assert truncate["audio_end_ms"] == 200


async def test_the_clients_clear_empties_the_speaker() -> None:
    call = CallSocket({}, media_timeout_s=5)
    call.play(_delta("resp_a", TONE * 5))
    cleared = json.dumps({"type": "output_audio_buffer.cleared", "response_id": "resp_a"})
    await call.send("output_audio_buffer.cleared", cleared)
    assert not call.speaker.playing
    assert _kinds(call) == ["output_audio_buffer.started", "output_audio_buffer.cleared"]
    [truncate] = await _truncations(call)
    assert truncate["audio_end_ms"] == 0
