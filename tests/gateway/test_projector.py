"""The duplex dialect's projection (`projector`): every kind's wire type and
envelope, the duplex extensions of OpenAI's events, and its own events."""

from __future__ import annotations

import base64
import json

import pytest

from antiphon.gateway.dialects.projector import project
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.gateway import server_events as server
from tests.support import reference

# The server->client catalogue of reference/realtime-duplex-api.md, read from it.
REFERENCE_SERVER_TYPES = set(reference.server_types())


# Wire names more than one kind projects to, each by the reference's name map.
SHARED_WIRE_TYPES = {"input_audio_buffer.cleared": {"input_cleared", "input_cancelled"}}


# ---------------------------------------------------------------- wire names
def test_every_server_event_kind_has_a_reference_wire_type() -> None:
    """A new oneof kind without a projection entry here fails this test."""
    assert set(server.KINDS) == set(server.WIRE_TYPE)
    assert set(server.WIRE_TYPE.values()) <= REFERENCE_SERVER_TYPES | set(
        reference.BEYOND_CATALOGUE
    )
    # Distinct kinds collapse onto one wire name only where the reference says so.
    by_wire: dict[str, set[str]] = {}
    for kind, wire in server.WIRE_TYPE.items():
        by_wire.setdefault(wire, set()).add(kind)
    assert {w: k for w, k in by_wire.items() if len(k) > 1} == SHARED_WIRE_TYPES


@pytest.mark.parametrize("kind", server.KINDS)
def test_every_kind_projects_to_its_wire_type_with_envelope(kind: str) -> None:
    wire = project(server.event(kind, seq=41))
    assert wire["type"] == server.WIRE_TYPE[kind]
    assert wire["event_id"] == f"event_{kind}"
    assert wire["server_event_seq"] == 41
    # What the gateway writes is plain JSON (no bytes or protobuf values leak).
    json.dumps(wire)


def test_event_without_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        project(spb.ServerEvent(seq=1, event_id="event_x"))


def test_empty_resume_token_projects_to_null() -> None:
    st = server.state()
    st.resume_token = ""
    assert project(server.event("session_created", st))["resume_token"] is None


def test_session_closed_and_heartbeat_ack_name_the_session() -> None:
    closed = project(
        server.event("session_closed", spb.SessionClosed(session_id="s", reason="timeout"))
    )
    assert (closed["session_id"], closed["reason"]) == ("s", "timeout")
    ack = project(server.event("heartbeat_ack", spb.HeartbeatAck(session_id="s")))
    assert ack["session_id"] == "s"


# ------------------------------------------------------------------- errors
def test_error_envelope_shape() -> None:
    wire = project(
        server.event(
            "error",
            spb.ErrorEvent(
                type="invalid_request_error",
                code="unsupported_turn_detection",
                message="semantic_vad is unsupported",
                event_id="evt_0001",
                param="turn_detection",
            ),
        )
    )
    assert wire["error"] == {
        "type": "invalid_request_error",
        "code": "unsupported_turn_detection",
        "message": "semantic_vad is unsupported",
        "param": "turn_detection",
        "event_id": "evt_0001",
    }


def test_error_envelope_uses_null_for_empty_param_and_event_id() -> None:
    wire = project(
        server.event(
            "error", spb.ErrorEvent(type="server_error", code="runtime_append_failed", message="m")
        )
    )
    assert set(wire["error"]) == {"type", "code", "message", "param", "event_id"}
    assert wire["error"]["param"] is None
    assert wire["error"]["event_id"] is None
    # The event's own id is the server's, not the client's.
    assert wire["event_id"] == "event_error"


def test_committed_wraps_the_native_event() -> None:
    wire = project(
        server.event(
            "input_committed",
            spb.InputCommitted(
                previous_item_id="",
                item_id="item_9b2d",
                turn_id=1,
                epoch=0,
                history_len=1,
                session_id="sess_demo_01",
            ),
        )
    )
    assert wire["previous_item_id"] is None
    assert wire["item_id"] == "item_9b2d"
    assert wire["event"] == {
        "type": "input.committed",
        "session_id": "sess_demo_01",
        "turn_id": 1,
        "epoch": 0,
        "history_len": 1,
        "realtime_item_id": "item_9b2d",
    }
    deferred = project(
        server.event(
            "input_committed", spb.InputCommitted(item_id="x", response_create_deferred=True)
        )
    )
    assert deferred["event"]["response_create_deferred"] is True


# ---------------------------------------------------------------- responses
def test_response_created_carries_top_level_response_id_and_duplex_metadata() -> None:
    r = server.response(status="in_progress")
    wire = project(server.event("response_created", spb.ResponseEvent(response=r)))
    assert wire["response_id"] == "resp_01"
    resp = wire["response"]
    assert resp["id"] == "resp_01"
    assert resp["object"] == "realtime.response"
    assert resp["status"] == "in_progress"
    assert resp["status_details"] is None
    assert resp["modalities"] == resp["output_modalities"] == ["audio"]
    assert resp["metadata"]["trace"] == "turn-3"
    assert resp["metadata"]["duplex_event"] == {
        "type": "response.created",
        "session_id": "sess_demo_01",
        "response_id": "resp_01",
        "epoch": 2,
        "turn_id": 1,
    }


@pytest.mark.parametrize(
    ("fmt", "label"),
    [
        (cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000), ("g711_ulaw", 8000)),
        (cpb.AudioFormat(encoding="g711_alaw", sample_rate_hz=8000), ("g711_alaw", 8000)),
        # A delta that names no encoding is PCM16, at the rate it names.
        (cpb.AudioFormat(sample_rate_hz=24000), ("pcm16", 24000)),
    ],
)
def test_audio_delta_is_labelled_as_the_session_encoded_it(
    fmt: cpb.AudioFormat, label: tuple[str, int]
) -> None:
    """The session encodes each delta and names the encoding: the projector
    sends its bytes as they are and labels them with that name."""
    coded = bytes(range(256))
    wire = project(
        server.event("audio_delta", spb.AudioDelta(ref=server.REF, audio=coded, format=fmt))
    )
    assert base64.b64decode(wire["delta"], validate=True) == coded
    assert (wire["format"], wire["sample_rate_hz"]) == label


def test_speak_rides_the_response_envelope() -> None:
    wire = project(
        server.event("response_speak", spb.Speak(ref=server.REF, session_id="s", epoch=3))
    )
    assert (wire["response_id"], wire["item_id"]) == ("resp_01", "item_resp_01")
    assert wire["metadata"] == {"session_id": "s", "epoch": 3, "model_speak": True}


def test_audio_delta_is_base64_pcm_with_format_rate_and_metadata() -> None:
    pcm = bytes(range(256)) * 4
    wire = project(
        server.event(
            "audio_delta",
            spb.AudioDelta(
                ref=server.REF,
                audio=pcm,
                session_id="sess_demo_01",
                epoch=1,
                end_of_turn=False,
                audio_duration_ms=1000,
                marks=[cpb.AudioTextMark(text_chars=11, audio_end_ms=1000)],
                playback=cpb.Playback(generated_ms=1000, sent_ms=1000),
                format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
            ),
        )
    )
    assert base64.b64decode(wire["delta"], validate=True) == pcm
    assert wire["format"] == "pcm16"
    assert wire["sample_rate_hz"] == 24000
    assert (wire["response_id"], wire["item_id"], wire["output_index"], wire["content_index"]) == (
        "resp_01",
        "item_resp_01",
        0,
        0,
    )
    assert wire["metadata"] == {
        "session_id": "sess_demo_01",
        "epoch": 1,
        "model_speak": True,
        "end_of_turn": False,
        "audio_duration_ms": 1000,
        "audio_text_marks": [{"text_chars": 11, "audio_end_ms": 1000}],
        "playback": {"generated_ms": 1000, "sent_ms": 1000, "played_ms": 0, "committed_ms": 0},
    }


def test_listen_carries_response_id_only_when_it_ends_a_precreated_response() -> None:
    bare = project(
        server.event("response_listen", spb.Listen(session_id="s", epoch=0, reason="model_listen"))
    )
    assert "response_id" not in bare
    assert bare["response"] == {
        "object": "realtime.response",
        "status": "listening",
        "metadata": {
            "type": "response.listen",
            "session_id": "s",
            "epoch": 0,
            "reason": "model_listen",
        },
    }
    ending = project(
        server.event("response_listen", spb.Listen(session_id="s", response_id="resp_9"))
    )
    assert ending["response_id"] == "resp_9"


def test_session_lifetime_events_have_the_reference_shapes() -> None:
    resumed = project(
        server.event(
            "session_resumed",
            spb.SessionResumed(
                session_id="s", incarnation=2, attachment_generation=3, resume_token="rt_x"
            ),
        )
    )
    assert {k: resumed[k] for k in ("session_id", "incarnation", "attachment_generation")} == {
        "session_id": "s",
        "incarnation": 2,
        "attachment_generation": 3,
    }
    assert resumed["resume_token"] == "rt_x"
    assert "session" not in resumed  # a resume from before sessions rode along
    replaced = project(
        server.event(
            "session_replaced", spb.SessionReplaced(session_id="s", attachment_generation=1)
        )
    )
    assert replaced["attachment_generation"] == 1
    expired = project(
        server.event(
            "session_expired", spb.SessionExpired(session_id="s", reason="idle_ttl_expired")
        )
    )
    assert expired["reason"] == "idle_ttl_expired"
    resync = project(
        server.event("resync_required", spb.ResyncRequired(session_id="s", reason="journal_gap"))
    )
    assert (resync["type"], resync["reason"]) == ("session.resync_required", "journal_gap")


def test_item_deleted_echoes_the_request_under_event() -> None:
    wire = project(server.event("item_deleted", spb.ItemDeleted(item_id="item_9b2d")))
    assert wire["item_id"] == "item_9b2d"
    assert wire["event"] == {"type": "conversation.item.deleted", "item_id": "item_9b2d"}


def test_item_truncated_echoes_the_request_and_the_transcript_kept() -> None:
    wire = project(
        server.event(
            "item_truncated",
            spb.ItemTruncated(
                item_id="item_resp_01", content_index=0, audio_end_ms=1850, transcript="It is"
            ),
        )
    )
    assert (wire["item_id"], wire["content_index"], wire["audio_end_ms"]) == (
        "item_resp_01",
        0,
        1850,
    )
    assert wire["event"] == {
        "type": "conversation.item.truncated",
        "item_id": "item_resp_01",
        "content_index": 0,
        "audio_end_ms": 1850,
        "transcript": "It is",
    }


def test_input_cancelled_is_input_audio_buffer_cleared_with_the_native_event() -> None:
    wire = project(server.event("input_cancelled", spb.InputCancelled(session_id="s", epoch=3)))
    assert wire["type"] == "input_audio_buffer.cleared"
    assert wire["event"] == {"type": "input.cancelled", "session_id": "s", "epoch": 3}
    # A plain clear stays bare, as the reference shows it.
    plain = project(server.event("input_cleared"))
    assert set(plain) == {"type", "event_id", "server_event_seq"}


# ------------------------------------------------------- playback and overlap
def test_playback_acknowledged_wraps_the_native_event_verbatim() -> None:
    wire = project(
        server.event(
            "playback_acknowledged",
            spb.PlaybackAcknowledged(
                session_id="sess_demo_01",
                epoch=0,
                response_id="resp_01",
                item_id="item_resp_01",
                played_ms=1000,
                committed_ms=1000,
                truncate=False,
                playback=cpb.Playback(
                    generated_ms=2400, sent_ms=2400, played_ms=1000, committed_ms=1000
                ),
                history_committed=False,
            ),
        )
    )
    assert set(wire) == {"type", "event_id", "server_event_seq", "event"}
    assert wire["event"] == {
        "type": "playback.acknowledged",
        "session_id": "sess_demo_01",
        "epoch": 0,
        "response_id": "resp_01",
        "item_id": "item_resp_01",
        "played_ms": 1000,
        "committed_ms": 1000,
        "truncate": False,
        "playback": {
            "generated_ms": 2400,
            "sent_ms": 2400,
            "played_ms": 1000,
            "committed_ms": 1000,
        },
        "history_committed": False,
    }


def test_overlap_decision_carries_every_reference_field() -> None:
    wire = project(
        server.event(
            "overlap_decision",
            spb.OverlapDecision(
                session_id="sess_demo_01",
                epoch=0,
                policy="listen_only",
                action="listen",
                reason="long_overlap_speech",
                overlap_ms=1400,
                buffer_audio=True,
                defer_runtime_append=True,
                force_listen=True,
            ),
        )
    )
    assert {k: v for k, v in wire.items() if k not in ("event_id", "server_event_seq")} == {
        "type": "overlap.decision",
        "session_id": "sess_demo_01",
        "epoch": 0,
        "policy": "listen_only",
        "action": "listen",
        "reason": "long_overlap_speech",
        "overlap_ms": 1400,
        "buffer_audio": True,
        "defer_runtime_append": True,
        "force_listen": True,
    }


def test_session_resumed_carries_the_session_as_it_is_now() -> None:
    """The new socket (and its client) learn the config, formats included, there."""
    config = cpb.SessionConfig(
        model="m",
        output_modalities=["audio"],
        input_audio_format=cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000),
        output_audio_format=cpb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=8000),
        resumable=True,
    )
    resumed = project(
        server.event(
            "session_resumed",
            spb.SessionResumed(
                session_id="s",
                incarnation=1,
                attachment_generation=2,
                resume_token="rt_y",
                session=spb.SessionState(config=config, session_id="s", state="open"),
            ),
        )
    )
    session = resumed["session"]
    assert session["audio"]["output"]["format"] == {"type": "audio/pcmu"}
    assert session["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert (session["id"], session["resumable"]) == ("s", True)


def test_a_malformed_call_is_the_reference_s_raw_fallback() -> None:
    """`duplex.function_call.done` wraps the native `function_call.done` with no
    call id, exactly the reference's example's keys."""
    frame = project(
        server.event(
            "function_call_malformed",
            spb.MalformedFunctionCall(
                session_id="sess_demo_01", epoch=0, response_id="resp_01", arguments="{"
            ),
        )
    )
    assert frame["type"] == "duplex.function_call.done"
    assert frame["event"] == {
        "type": "function_call.done",
        "session_id": "sess_demo_01",
        "epoch": 0,
        "call_id": None,
        "name": None,
        "arguments": "{",
    }
