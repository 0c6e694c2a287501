"""The commands built from nothing but their event (`commands`): resume, responses,
commits, text, barge-in, playback acks and event acks."""

from __future__ import annotations

from typing import Any

import pytest

from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate.translator import Translator
from antiphon.v1 import session_pb2 as spb
from tests.gateway import client_events as client


def test_session_resume_is_a_handshake_with_typed_fields() -> None:
    cmd = Translator().open(
        {
            "type": "session.resume",
            "session_id": "sess_1",
            "incarnation": 2,
            "resume_token": "rt_x",
            "last_received_server_event_seq": 40,
        },
        {"autostart": "0"},
    )
    assert cmd.resume == spb.ResumeSession(
        session_id="sess_1", incarnation=2, resume_token="rt_x", last_received_seq=40
    )
    with pytest.raises(ClientError) as info:
        Translator().open({"type": "session.update", "session": {}}, {"autostart": "0"})
    assert info.value.code == "session_not_open"
    with pytest.raises(ClientError) as info:
        Translator().open({"type": "session.resume", "session_id": "s"}, {})
    assert info.value.param == "resume_token"


# ---------------------------------------------------------- response.create
def test_response_create_carries_every_option() -> None:
    cmd = Translator().translate(
        {
            "type": "response.create",
            "event_id": "evt_0070",
            "response": {
                "modalities": ["audio", "text"],
                "instructions": "Answer in one sentence.",
                "output_audio_format": "pcm16",
                "temperature": 0.6,
                "max_output_tokens": 256,
                "metadata": {"trace": "turn-3", "n": 4},
            },
        }
    )
    req = cmd.create_response
    assert cmd.event_id == "evt_0070"
    assert req.instructions == "Answer in one sentence."
    assert list(req.output_modalities) == ["audio", "text"]
    assert req.temperature == pytest.approx(0.6)
    assert req.max_output_tokens == 256
    assert dict(req.metadata) == {"trace": "turn-3", "n": "4"}


def test_response_create_null_instructions_are_not_given() -> None:
    """LiveKit's `generate_reply()` sends `"instructions": null`: the session's apply."""
    req = (
        Translator()
        .translate({"type": "response.create", "response": {"instructions": None}})
        .create_response
    )
    assert not req.HasField("instructions")
    # `session.update` reads null the same way.
    assert not client.patch({"instructions": None}).HasField("instructions")


def test_response_create_without_body_sets_no_override() -> None:
    req = Translator().translate({"type": "response.create"}).create_response
    for name in ("instructions", "temperature", "max_output_tokens"):
        assert not req.HasField(name), name
    assert not req.output_modalities and not req.metadata


def test_response_create_ga_spellings_and_inf() -> None:
    req = (
        Translator()
        .translate(
            {
                "type": "response.create",
                "response": {"output_modalities": ["text"], "max_output_tokens": "inf"},
            }
        )
        .create_response
    )
    assert list(req.output_modalities) == ["text"]
    assert req.HasField("max_output_tokens") and req.max_output_tokens == 0
    beta = (
        Translator()
        .translate({"type": "response.create", "response": {"max_response_output_tokens": 9}})
        .create_response
    )
    assert beta.max_output_tokens == 9


@pytest.mark.parametrize(
    ("response", "param"),
    [
        ("now", "response"),
        ({"instructions": 5}, "response.instructions"),
        ({"modalities": "audio"}, "response.output_modalities"),
        ({"temperature": "hot"}, "response.temperature"),
        ({"temperature": True}, "response.temperature"),
        ({"max_output_tokens": 0}, "response.max_output_tokens"),
        ({"max_output_tokens": 1.5}, "response.max_output_tokens"),
        ({"max_output_tokens": "infinite"}, "response.max_output_tokens"),
        ({"max_output_tokens": True}, "response.max_output_tokens"),
        ({"metadata": ["a"]}, "response.metadata"),
    ],
)
def test_response_create_bad_types_are_refused_with_their_param(response: Any, param: str) -> None:
    err = client.refused({"type": "response.create", "response": response})
    assert (err.code, err.param) == ("invalid_value", param)


def test_response_cancel_carries_the_response_id() -> None:
    cmd = Translator().translate({"type": "response.cancel", "response_id": "resp_1"})
    assert cmd.cancel_response == spb.CancelResponse(response_id="resp_1")
    err = client.refused({"type": "response.cancel", "response_id": 7})
    assert (err.code, err.param) == ("invalid_value", "response_id")


def test_commit_is_speech_false_is_a_silence_declaration() -> None:
    cmd = Translator().translate({"type": "input.commit", "is_speech": False})
    assert cmd.commit.HasField("is_speech") and cmd.commit.is_speech is False
    assert (
        not Translator()
        .translate({"type": "input_audio_buffer.commit"})
        .commit.HasField("is_speech")
    )


@pytest.mark.parametrize("etype", ["input.text.append", "input_text.append", "push_text"])
def test_text_append_and_its_aliases_carry_the_text(etype: str) -> None:
    cmd = Translator().translate({"type": etype, "text": "and tomorrow?"})
    assert cmd.append_text == spb.AppendText(text="and tomorrow?")
    assert cmd.client_type == "input.text.append"


@pytest.mark.parametrize(
    ("event", "code"),
    [
        ({}, "missing_required_parameter"),
        ({"text": None}, "missing_required_parameter"),
        ({"text": ""}, "invalid_value"),
        ({"text": 5}, "invalid_value"),
        ({"text": ["a"]}, "invalid_value"),
    ],
)
def test_text_append_needs_a_non_empty_string(event: dict[str, Any], code: str) -> None:
    err = client.refused({"type": "push_text", **event})
    assert (err.code, err.param, err.type) == (code, "text", "invalid_request_error")


def test_barge_in_and_turn_signal_barge_in_are_one_command() -> None:
    bare = Translator().translate({"type": "barge_in"})
    assert bare.barge_in == spb.BargeIn(source="client_event")
    assert bare.client_type == "barge_in"
    signal = Translator().translate(
        {"type": "turn.signal", "event": "barge_in", "payload": {"source": "client_vad"}}
    )
    assert signal.barge_in == spb.BargeIn(source="client_vad")
    assert signal.client_type == "turn.signal"
    alias = Translator().translate({"type": "signal_turn", "event": "barge_in"})
    assert alias.barge_in == spb.BargeIn(source="client_event")
    assert alias.client_type == "turn.signal"


@pytest.mark.parametrize(
    ("event", "code", "param"),
    [
        ({}, "missing_required_parameter", "event"),
        ({"event": "end_of_turn"}, "invalid_value", "event"),
        ({"event": "speak"}, "invalid_value", "event"),
        ({"event": 1}, "invalid_value", "event"),
        ({"event": "barge_in", "payload": "now"}, "invalid_value", "payload"),
        ({"event": "barge_in", "payload": {"source": 3}}, "invalid_value", "payload.source"),
    ],
)
def test_turn_signal_other_than_barge_in_is_refused_on_event(
    event: dict[str, Any], code: str, param: str
) -> None:
    for etype in ("turn.signal", "signal_turn"):
        err = client.refused({"type": etype, **event})
        assert (err.code, err.param) == (code, param)


def test_playback_ack_from_the_reference() -> None:
    cmd = Translator().translate(
        {
            "type": "playback.ack",
            "response_id": "resp_01",
            "item_id": "item_resp_01",
            "played_ms": 1000,
            "committed_ms": 1000,
        }
    )
    ack = cmd.playback_ack
    assert ack == spb.PlaybackAck(
        response_id="resp_01", item_id="item_resp_01", played_ms=1000, committed_ms=1000
    )
    assert ack.truncate is False
    # The truncating ack after an interruption names no item.
    trunc = Translator().translate(
        {
            "type": "audio.playback_ack",
            "response_id": "resp_01",
            "played_ms": 1850,
            "committed_ms": 1850,
            "truncate": True,
        }
    )
    assert trunc.client_type == "playback.ack"
    assert trunc.playback_ack == spb.PlaybackAck(
        response_id="resp_01", played_ms=1850, committed_ms=1850, truncate=True
    )
    plain = Translator().translate({"type": "playback.ack", "response_id": "r", "played_ms": 0})
    assert not plain.playback_ack.HasField("committed_ms")  # = as much as was played


_ACK = {"response_id": "resp_01", "played_ms": 1000}


@pytest.mark.parametrize(
    ("change", "code", "param"),
    [
        ({"response_id": None}, "missing_required_parameter", "response_id"),
        ({"response_id": ""}, "invalid_value", "response_id"),
        ({"played_ms": None}, "missing_required_parameter", "played_ms"),
        ({"played_ms": -1}, "invalid_value", "played_ms"),
        ({"played_ms": 10.5}, "invalid_value", "played_ms"),
        ({"played_ms": False}, "invalid_value", "played_ms"),
        ({"committed_ms": -1}, "invalid_value", "committed_ms"),
        ({"committed_ms": "all"}, "invalid_value", "committed_ms"),
        ({"committed_ms": 1001}, "invalid_value", "committed_ms"),
        ({"truncate": "yes"}, "invalid_value", "truncate"),
        ({"item_id": 7}, "invalid_value", "item_id"),
    ],
)
def test_bad_playback_ack_is_one_typed_error(change: dict[str, Any], code: str, param: str) -> None:
    event = {"type": "playback.ack", **_ACK, **change}
    event = {k: v for k, v in event.items() if v is not None}
    err = client.refused(event)
    assert (err.code, err.param) == (code, param)


def test_event_ack_needs_its_seq() -> None:
    err = client.refused({"type": "session.event_ack"})
    assert (err.code, err.param) == ("missing_required_parameter", "server_event_seq")
