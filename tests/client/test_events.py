"""The client's typed events and its collector's arithmetic, on events built
by hand with the receipt times a socket would have stamped."""

from __future__ import annotations

import base64
from typing import Any

from antiphon.client import EventCollector, audio
from antiphon.client.events import (
    AudioDelta,
    ErrorEvent,
    Event,
    FunctionCall,
    ResponseDone,
    SessionEvent,
    parse,
    pretty,
)

RATE = 24000


def delta(
    ms: int, response_id: str = "resp_1", type_: str = "response.output_audio.delta"
) -> dict[str, Any]:
    pcm = audio.silence(ms, RATE)
    return {"type": type_, "response_id": response_id, "delta": base64.b64encode(pcm).decode()}


def test_frames_of_either_dialect_parse_to_their_kind() -> None:
    assert isinstance(parse({"type": "response.output_audio.delta", "delta": ""}), AudioDelta)
    # The beta spelling a duplex client may still get.
    assert isinstance(parse({"type": "response.audio.delta", "delta": ""}), AudioDelta)
    created = parse({"type": "session.created", "session": {"id": "sess_1"}, "server_event_seq": 1})
    assert isinstance(created, SessionEvent) and created.session_id == "sess_1"
    assert created.seq == 1
    assert parse({"type": "session.created", "session": {"id": "s"}}).seq is None  # OpenAI's
    error = parse({"type": "error", "error": {"code": "x", "message": "m", "event_id": "e1"}})
    assert isinstance(error, ErrorEvent) and (error.code, error.related_event_id) == ("x", "e1")
    call = parse(
        {"type": "response.function_call_arguments.done", "name": "f", "arguments": '{"a": 1}'}
    )
    assert isinstance(call, FunctionCall) and call.arguments == {"a": 1}
    done = parse(
        {
            "type": "response.done",
            "response": {
                "id": "resp_9",
                "status": "cancelled",
                "status_details": {"reason": "turn_detected"},
            },
        }
    )
    assert isinstance(done, ResponseDone)
    assert (done.response_id, done.status, done.reason) == ("resp_9", "cancelled", "turn_detected")
    unknown = parse({"type": "overlap.decision", "action": "listen"})
    assert type(unknown) is Event and unknown.type == "overlap.decision"


def test_the_wire_log_shows_audio_by_its_size() -> None:
    line = pretty(delta(100))
    assert line.startswith("response.output_audio.delta")
    assert f'"delta": "<{RATE * 2 // 10} bytes>"' in line
    sent = pretty(
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(b"\0" * 8).decode()}
    )
    assert '"audio": "<8 bytes>"' in sent


def test_first_audio_is_timed_from_the_last_commit_and_end_of_speech_before_it() -> None:
    collector = EventCollector(RATE)
    collector.mark_end_of_speech(10.0)
    collector.mark_commit(10.2)
    collector.record(parse({"type": "response.created", "response": {"id": "resp_1"}}, 10.3))
    collector.record(parse(delta(200), 10.9))
    collector.mark_commit(11.0)  # a later commit does not move this response's mark
    [timing] = collector.timings()
    assert round(timing.commit_to_first_audio_ms or 0) == 700
    assert round(timing.end_of_speech_to_first_audio_ms or 0) == 900


def test_a_player_runs_dry_only_when_a_chunk_comes_after_all_before_it_was_played() -> None:
    collector = EventCollector(RATE)
    collector.record(parse({"type": "response.created", "response": {"id": "resp_1"}}, 0.0))
    # 200 ms chunks: the second arrives while the first plays, the third 300 ms
    # after the second's end of play would have been (0.4 s), the fourth early.
    for at in (1.0, 1.1, 1.7, 1.75):
        collector.record(parse(delta(200), at))
    collector.record(
        parse({"type": "response.done", "response": {"id": "resp_1", "status": "completed"}}, 2.0)
    )
    [timing] = collector.timings()
    assert timing.status == "completed"
    assert timing.audio_ms == 800
    assert [round(g) for g in timing.chunk_gaps_ms] == [100, 600, 50]
    # Played until 1.4 s, the third came at 1.7: one stall of 300 ms.
    assert (timing.stalls, round(timing.stall_ms)) == (1, 300)
    # What a listener heard before each later chunk: silence only before the third.
    assert [round(g) for g in timing.join_silences_ms] == [0, 300, 0]


def test_events_of_another_response_are_not_counted_in_this_one() -> None:
    collector = EventCollector(RATE)
    collector.record(parse({"type": "response.created", "response": {"id": "resp_1"}}, 0.0))
    collector.record(parse(delta(200, "resp_1"), 0.5))
    collector.record(parse(delta(200, "resp_other"), 0.6))
    [timing] = collector.timings()
    assert timing.audio_ms == 200 and timing.chunk_gaps_ms == []
