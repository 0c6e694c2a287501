"""The native `/v1/duplex` dialect: one mapping of the reference's name map per test."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from google.protobuf.message import Message

from antiphon.gateway.dialects import native
from antiphon.gateway.dialects.dialect import DUPLEX, NATIVE
from antiphon.gateway.dialects.projector import project
from antiphon.gateway.translate.translator import Translator
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from tests.gateway import server_events as server

KINDS = server.KINDS
REF = server.REF
ENVELOPE = ("type", "event_id", "server_event_seq")


def _event(kind: str, body: Message | None = None, *, seq: int = 9) -> spb.ServerEvent:
    return server.event(kind, body, seq=seq)


def _body(frame: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in frame.items() if k not in ENVELOPE}


# ------------------------------------------------------------------- inbound
@pytest.mark.parametrize("name", ["session.create", "open_session", "session.config"])
def test_native_session_names_become_session_update(name: str) -> None:
    event = {"type": name, "event_id": "evt_1", "session": {"instructions": "Be brief."}}
    assert native.normalize(event) == {
        "type": "session.update",
        "event_id": "evt_1",
        "session": {"instructions": "Be brief."},
    }


def test_native_session_create_may_carry_its_config_at_the_top_level() -> None:
    event = {"type": "session.create", "event_id": "evt_1", "instructions": "Hi", "voice": "joe"}
    assert native.normalize(event) == {
        "type": "session.update",
        "event_id": "evt_1",
        "session": {"instructions": "Hi", "voice": "joe"},
    }


def test_other_client_events_pass_to_the_translator_unchanged() -> None:
    for event in ({"type": "input.commit"}, {"type": "response.create"}, {"type": 3}, {}):
        assert native.normalize(event) is event


def test_session_create_opens_through_the_shared_translator() -> None:
    event = native.normalize({"type": "session.create", "instructions": "Hi", "event_id": "e1"})
    cmd = Translator().open(event, {})
    assert cmd.WhichOneof("kind") == "open"
    assert cmd.open.config.instructions == "Hi"
    assert cmd.event_id == "e1"


def test_session_config_after_the_open_is_an_update() -> None:
    cmd = Translator().translate(native.normalize({"type": "session.config", "voice": "joe"}))
    assert cmd.WhichOneof("kind") == "update"
    assert cmd.update.config.voice == "joe"


def test_the_duplex_dialect_renames_nothing() -> None:
    event = {"type": "session.create"}
    assert DUPLEX.normalize(event) is event
    assert DUPLEX.projector is not None and NATIVE.projector is not None
    (frame,) = DUPLEX.projector()(_event("input_cancelled"))
    assert frame["type"] == "input_audio_buffer.cleared"
    (native_frame,) = NATIVE.projector()(_event("input_cancelled"))
    assert native_frame["type"] == "input.cancelled"


# ------------------------------------------------------------------ outbound
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_one_native_frame_with_the_envelope(kind: str) -> None:
    frame = native.project_native(_event(kind, seq=12))
    assert frame["event_id"] == f"event_{kind}"
    assert frame["server_event_seq"] == 12
    assert isinstance(frame["type"], str) and frame["type"]


def test_input_committed_is_the_native_event_unwrapped() -> None:
    ev = _event(
        "input_committed",
        spb.InputCommitted(
            previous_item_id="item_a",
            item_id="item_9b2d",
            turn_id=2,
            epoch=1,
            history_len=3,
            response_create_deferred=True,
            session_id="sess_demo_01",
        ),
    )
    frame = native.project_native(ev)
    assert frame["type"] == "input.committed"
    assert _body(frame) == {
        "session_id": "sess_demo_01",
        "turn_id": 2,
        "epoch": 1,
        "history_len": 3,
        "realtime_item_id": "item_9b2d",
        "response_create_deferred": True,
        "previous_item_id": "item_a",
    }


def test_input_cancelled_keeps_its_native_name() -> None:
    frame = native.project_native(
        _event("input_cancelled", spb.InputCancelled(session_id="s", epoch=4))
    )
    assert frame["type"] == "input.cancelled"
    assert _body(frame) == {"session_id": "s", "epoch": 4}


def test_text_delta_is_response_text_delta() -> None:
    frame = native.project_native(_event("text_delta", spb.TextDelta(ref=REF, delta="Tomorrow")))
    assert frame["type"] == "response.text.delta"
    assert _body(frame) == _body(
        project(_event("text_delta", spb.TextDelta(ref=REF, delta="Tomorrow")))
    )


def test_audio_delta_carries_audio_and_its_metadata_at_the_top_level() -> None:
    ev = _event(
        "audio_delta",
        spb.AudioDelta(
            ref=REF,
            audio=b"\x01\x00\x02\x00",
            session_id="s",
            epoch=1,
            audio_duration_ms=1000,
            marks=[cpb.AudioTextMark(text_chars=11, audio_end_ms=1000)],
            playback=cpb.Playback(generated_ms=1000, sent_ms=1000),
            format=cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000),
        ),
    )
    realtime = project(ev)
    frame = native.project_native(ev)
    assert frame["type"] == "response.output_audio.delta"
    assert frame["audio"] == realtime["delta"]
    assert base64.b64decode(frame["audio"]) == b"\x01\x00\x02\x00"
    assert "delta" not in frame and "metadata" not in frame
    for key, value in realtime["metadata"].items():
        assert frame[key] == value
    assert (frame["response_id"], frame["item_id"]) == ("resp_01", "item_resp_01")
    assert (frame["format"], frame["sample_rate_hz"]) == (realtime["format"], 24000)


def _response(status: str, reason: str = "") -> spb.Response:
    return spb.Response(
        id="resp_01",
        status=status,
        status_reason=reason,
        session_id="s",
        epoch=2,
        turn_id=1,
        playback=cpb.Playback(generated_ms=2400, sent_ms=2400, played_ms=900, committed_ms=900),
    )


def test_a_cancelled_response_ends_as_audio_cancelled() -> None:
    ev = _event("response_done", spb.ResponseEvent(response=_response("cancelled", "barge_in")))
    frame = native.project_native(ev)
    assert frame["type"] == "audio.cancelled"
    body = _body(frame)
    assert body.pop("response") == project(ev)["response"]
    assert body == {
        "session_id": "s",
        "epoch": 2,
        "response_id": "resp_01",
        "reason": "barge_in",
        "committed_ms": 900,
        "playback": {"generated_ms": 2400, "sent_ms": 2400, "played_ms": 900, "committed_ms": 900},
    }


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_other_terminal_responses_stay_response_done(status: str) -> None:
    ev = _event("response_done", spb.ResponseEvent(response=_response(status)))
    assert native.project_native(ev) == project(ev)


def test_function_call_arguments_done_is_function_call_done() -> None:
    ref = spb.PartRef(response_id="resp_fc_01", item_id="item_fc_01")
    frame = native.project_native(
        _event(
            "function_call_arguments_done",
            spb.FunctionCallArguments(
                ref=ref, call_id="call_7d1f", name="get_weather", arguments='{"city":"HK"}'
            ),
        )
    )
    assert frame["type"] == "function_call.done"
    assert _body(frame) == {
        "response_id": "resp_fc_01",
        "item_id": "item_fc_01",
        "call_id": "call_7d1f",
        "name": "get_weather",
        "arguments": '{"city":"HK"}',
    }


def test_playback_acknowledged_is_the_event_the_realtime_dialect_wraps() -> None:
    ev = _event(
        "playback_acknowledged",
        spb.PlaybackAcknowledged(session_id="s", response_id="resp_01", played_ms=1000),
    )
    frame = native.project_native(ev)
    assert frame["type"] == "playback.acknowledged"
    wrapped = dict(project(ev)["event"])
    assert wrapped.pop("type") == "playback.acknowledged"
    assert _body(frame) == wrapped


def test_item_deleted_and_truncated_are_the_echoed_events() -> None:
    deleted = native.project_native(_event("item_deleted", spb.ItemDeleted(item_id="item_9b2d")))
    assert (deleted["type"], _body(deleted)) == (
        "conversation.item.deleted",
        {"item_id": "item_9b2d"},
    )
    ev = _event(
        "item_truncated", spb.ItemTruncated(item_id="i", audio_end_ms=1850, transcript="It is")
    )
    truncated = native.project_native(ev)
    assert truncated["type"] == "conversation.item.truncated"
    echoed = dict(project(ev)["event"])
    echoed.pop("type")
    assert _body(truncated) == echoed


def test_errors_use_the_flat_native_shape() -> None:
    frame = native.project_native(
        _event(
            "error",
            spb.ErrorEvent(
                type="invalid_request_error",
                code="input_audio_buffer_empty",
                message="commit needs audio",
                event_id="evt_0060",
                param="",
            ),
        )
    )
    assert frame["type"] == "error"
    assert frame["event_id"] == "event_error"  # the server's id; the client's is related
    assert _body(frame) == {
        "error": "commit needs audio",
        "code": "input_audio_buffer_empty",
        "error_type": "invalid_request_error",
        "param": None,
        "related_event_id": "evt_0060",
    }


@pytest.mark.parametrize(
    "kind",
    [
        "session_created",
        "session_resumed",
        "session_replaced",
        "session_expired",
        "resync_required",
        "heartbeat_ack",
        "response_speak",
        "response_listen",
        "audio_done",
        "text_done",
        "audio_transcript_delta",
        "overlap_decision",
        "output_audio_cleared",
    ],
)
def test_events_the_map_passes_through_are_the_realtime_frame(kind: str) -> None:
    ev = _event(kind)
    assert native.project_native(ev) == project(ev)
