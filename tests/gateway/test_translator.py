"""Client JSON -> typed ClientCommand (`translator`): types, aliases and dispatch,
the open handshake, appends, and the input encoding a connection declares."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from antiphon.common import g711
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate.translator import ALIASES, HANDLERS, Translator, metric_label
from antiphon.session.config import session_config
from antiphon.v1 import common_pb2 as cpb
from tests.gateway import client_events as client

# The reference's client->server catalogue (21 types) and its input aliases.
REFERENCE_CLIENT_TYPES = [
    "session.update",
    "session.heartbeat",
    "session.event_ack",
    "session.close",
    "session.resume",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input.commit",
    "input_audio_buffer.clear",
    "input.cancel",
    "input.text.append",
    "conversation.item.create",
    "conversation.item.retrieve",
    "conversation.item.delete",
    "conversation.item.truncate",
    "response.create",
    "response.cancel",
    "output_audio_buffer.clear",
    "barge_in",
    "turn.signal",
    "playback.ack",
]


REFERENCE_CLIENT_ALIASES = [
    "push_chunk",
    "input.audio.append",
    "input_text.append",
    "push_text",
    "signal_turn",
    "audio.playback_ack",
    "close_session",
    "close",
    "session_close",
]


# A minimal valid event per canonical type, and the command kind it becomes.
CANONICAL: dict[str, tuple[dict[str, Any], str]] = {
    "session.update": ({"session": {}}, "update"),
    "input_audio_buffer.append": (
        {"audio": base64.b64encode(b"\x01\x00" * 8).decode()},
        "append_audio",
    ),
    "input_audio_buffer.commit": ({}, "commit"),
    "input_audio_buffer.clear": ({}, "clear_input"),
    "input.cancel": ({}, "cancel_input"),
    "input.text.append": ({"text": "and tomorrow?"}, "append_text"),
    "conversation.item.create": (
        {
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Hi."}],
            }
        },
        "create_item",
    ),
    "conversation.item.retrieve": ({"item_id": "item_1"}, "retrieve_item"),
    "conversation.item.delete": ({"item_id": "item_1"}, "delete_item"),
    "conversation.item.truncate": (
        {"item_id": "item_1", "content_index": 0, "audio_end_ms": 1850},
        "truncate_item",
    ),
    "response.create": ({}, "create_response"),
    "response.cancel": ({}, "cancel_response"),
    "output_audio_buffer.clear": ({}, "clear_output_audio"),
    "barge_in": ({}, "barge_in"),
    "turn.signal": ({"event": "barge_in"}, "barge_in"),
    "playback.ack": ({"response_id": "resp_1", "played_ms": 1000}, "playback_ack"),
    "session.close": ({}, "close"),
    "session.heartbeat": ({}, "heartbeat"),
    "session.event_ack": ({"server_event_seq": 3}, "event_ack"),
}


# The legacy append aliases carry WAV unless the event names a format.
ALIAS_PAYLOAD: dict[str, dict[str, Any]] = {
    "push_chunk": {"chunk": base64.b64encode(client.wav(b"\x01\x00" * 8)).decode()},
    "input.audio.append": {"audio": base64.b64encode(client.wav(b"\x01\x00" * 8)).decode()},
}


@pytest.mark.parametrize(
    "event",
    [
        client.append(b"\x00\x00"),
        {"type": "response.create"},
        {"type": "close"},
    ],
)
def test_open_refuses_anything_but_session_update_or_resume_first(event: dict[str, Any]) -> None:
    with pytest.raises(ClientError) as info:
        Translator().open(event, {})
    assert info.value.code == "session_not_open"
    assert info.value.param == "type"


def test_open_validates_the_session_like_update() -> None:
    with pytest.raises(ClientError) as info:
        Translator().open(client.update({"turn_detection": {"type": "far_field_vad"}}), {})
    assert info.value.code == "unsupported_turn_detection"


def test_connect_opens_with_the_server_defaults_and_the_url_query() -> None:
    """OpenAI's dialect opens as the socket is accepted: no client event yet."""
    cmd = Translator().connect({})
    assert cmd.WhichOneof("kind") == "open"
    assert cmd.open.on_connect is True
    assert cmd.open.config == cpb.SessionConfigPatch()
    assert cmd.client_type == "websocket.connect" and not cmd.event_id
    query = {"model": "antiphon-cascade", "session_id": "sess_x", "resumable": "1"}
    cfg = Translator().connect(query).open.config
    assert (cfg.model, cfg.session_id, cfg.resumable) == ("antiphon-cascade", "sess_x", True)
    with pytest.raises(ClientError) as info:
        Translator().connect({"session_id": "no spaces"})
    assert (info.value.code, info.value.param) == ("invalid_value", "session.session_id")
    # A handshake open is the client's own: no `on_connect`.
    assert Translator().open(client.update({}), {}).open.on_connect is False


# ------------------------------------------------------- types and aliases
@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_every_alias_translates_to_its_canonical_command(alias: str) -> None:
    canonical = ALIASES[alias]
    payload, kind = CANONICAL[canonical]
    cmd = Translator().translate({"type": alias, **ALIAS_PAYLOAD.get(alias, payload)})
    assert cmd.WhichOneof("kind") == kind
    assert cmd.client_type == canonical


@pytest.mark.parametrize(("etype", "case"), sorted(CANONICAL.items()))
def test_every_canonical_type_translates_to_its_command(
    etype: str, case: tuple[dict[str, Any], str]
) -> None:
    payload, kind = case
    cmd = Translator().translate({"type": etype, **payload})
    assert cmd.WhichOneof("kind") == kind
    assert cmd.client_type == etype


def test_push_chunk_accepts_its_chunk_field() -> None:
    pcm = client.sine(16000, 160)
    cmd = Translator().translate({"type": "push_chunk", "chunk": client.b64(client.wav(pcm))})
    assert (cmd.append_audio.pcm16, cmd.append_audio.sample_rate_hz) == (pcm, 16000)


@pytest.mark.parametrize("etype", REFERENCE_CLIENT_TYPES + REFERENCE_CLIENT_ALIASES)
def test_every_reference_client_type_translates_to_a_command(etype: str) -> None:
    """Every documented client type and alias is handled: nothing is left "not yet"."""
    if etype == "session.resume":
        # A handshake: valid only as a connection's first event.
        assert client.refused({"type": etype}).code == "session_already_open"
        return
    canonical = ALIASES.get(etype, etype)
    assert canonical in HANDLERS
    payload, kind = CANONICAL[canonical]
    cmd = Translator().translate({"type": etype, **ALIAS_PAYLOAD.get(etype, payload)})
    assert cmd.WhichOneof("kind") == kind
    assert metric_label({"type": etype}) == etype


def test_the_catalogue_is_exactly_the_reference() -> None:
    """21 client types and 9 aliases: no handler or alias the reference does not name."""
    assert len(REFERENCE_CLIENT_TYPES) == 21 and len(REFERENCE_CLIENT_ALIASES) == 9
    assert set(HANDLERS) | {"session.resume", "input.commit"} == set(REFERENCE_CLIENT_TYPES)
    assert set(ALIASES) | {"input.commit"} == set(REFERENCE_CLIENT_ALIASES) | {"input.commit"}
    assert metric_label({"type": "made.up"}) == "unknown"


@pytest.mark.parametrize(
    "event", [{"type": "response.make"}, {"type": "session.updated"}, {"type": "conversation"}]
)
def test_unknown_type_is_invalid_event(event: dict[str, Any]) -> None:
    err = client.refused(event)
    assert err.code == "invalid_event"
    assert err.param == "type"


@pytest.mark.parametrize("event", [{}, {"type": ""}, {"type": 7}, {"type": None}])
def test_missing_or_non_string_type_is_invalid_event(event: dict[str, Any]) -> None:
    err = client.refused(event)
    assert err.code == "invalid_event"
    assert err.param == "type"


def test_event_id_and_operation_id_are_echoed_into_the_command() -> None:
    cmd = Translator().translate(
        {"type": "input_audio_buffer.commit", "event_id": "evt_42", "operation_id": "op_7"}
    )
    assert (cmd.event_id, cmd.operation_id) == ("evt_42", "op_7")
    bare = Translator().translate({"type": "input_audio_buffer.commit", "event_id": 42})
    assert (bare.event_id, bare.operation_id) == ("", "")


# ------------------------------------------------------------ input events
def test_input_cancel_is_a_bare_command() -> None:
    cmd = Translator().translate({"type": "input.cancel", "event_id": "evt_c"})
    assert cmd.WhichOneof("kind") == "cancel_input"
    assert (cmd.client_type, cmd.event_id) == ("input.cancel", "evt_c")


# ----------------------------------------------------- output and overlap
def test_output_audio_buffer_clear_is_a_bare_command() -> None:
    cmd = Translator().translate({"type": "output_audio_buffer.clear"})
    assert cmd.WhichOneof("kind") == "clear_output_audio"


# ------------------------------------------------------------------- append
@pytest.mark.parametrize(
    ("event", "code", "param"),
    [
        ({"audio": "not base64!!"}, "invalid_audio", "audio"),
        ({"audio": "AAE"}, "invalid_audio", "audio"),
        ({"audio": client.b64(b"\x00\x01\x02")}, "invalid_audio", "audio"),
        ({}, "missing_required_parameter", "audio"),
        ({"audio": None}, "missing_required_parameter", "audio"),
        ({"audio": 123}, "invalid_value", "audio"),
        ({"audio": [client.b64(b"\x00\x00")]}, "invalid_value", "audio"),
        (
            {"audio": client.b64(b"\x00\x00"), "sample_rate_hz": 8000},
            "unsupported_audio_format",
            "sample_rate_hz",
        ),
        (
            {"audio": client.b64(b"\x00\x00"), "sample_rate_hz": "16000"},
            "invalid_value",
            "sample_rate_hz",
        ),
        ({"audio": client.b64(b"\x00\x00"), "is_speech": "yes"}, "invalid_value", "is_speech"),
    ],
)
def test_bad_append_is_refused_with_typed_error(
    event: dict[str, Any], code: str, param: str
) -> None:
    err = client.refused({"type": "input_audio_buffer.append", **event})
    assert (err.code, err.param) == (code, param)
    assert err.type == "invalid_request_error"


def test_append_passes_audio_through_unchanged_at_any_supported_rate() -> None:
    """The gateway only decodes base64: the session resamples, in mailbox order."""
    for rate in (16000, 24000):
        pcm = client.sine(rate, 1600)
        cmd = Translator().translate(client.append(pcm, is_speech=True))
        assert cmd.append_audio.pcm16 == pcm
        assert cmd.append_audio.sample_rate_hz == 0  # = the session's input rate
        assert cmd.append_audio.HasField("is_speech") and cmd.append_audio.is_speech is True
    assert not Translator().translate(client.append(pcm)).append_audio.HasField("is_speech")


def test_per_event_sample_rate_rides_the_command() -> None:
    pcm = client.sine(16000, 160)
    cmd = Translator().translate(client.append(pcm, sample_rate_hz=16000))
    assert (cmd.append_audio.pcm16, cmd.append_audio.sample_rate_hz) == (pcm, 16000)


def test_wav_rate_must_agree_with_sample_rate_hz() -> None:
    err = client.refused(
        client.append(client.wav(b"\x00\x00" * 8, 16000), format="wav", sample_rate_hz=24000)
    )
    assert (err.code, err.param) == ("invalid_value", "sample_rate_hz")


def test_open_declares_the_input_encoding_too() -> None:
    t = Translator()
    t.open(client.update({"input_audio_format": "g711_alaw"}), {})
    coded = g711.pcm16_to_alaw(client.sine(8000, 80))
    assert t.translate(client.append(coded)).append_audio.sample_rate_hz == 8000


def test_a_resumed_socket_reads_appends_in_the_sessions_input_encoding() -> None:
    """A socket that resumed saw no opening update: the session's config is its word."""
    t = Translator()
    t.adopt(_with_input("g711_ulaw", 8000))
    coded = g711.pcm16_to_ulaw(client.sine(8000, 80))
    append = t.translate(client.append(coded)).append_audio
    assert (append.pcm16, append.sample_rate_hz) == (g711.ulaw_to_pcm16(coded), 8000)


def test_the_sockets_own_declaration_wins_over_an_adopted_encoding() -> None:
    t = Translator()
    t.translate(client.update({"input_audio_format": "g711_alaw"}))
    # Resumed elsewhere by this gateway: the session may not have applied it yet.
    t.adopt(session_config.defaults("m"))
    coded = g711.pcm16_to_alaw(client.sine(8000, 80))
    assert t.translate(client.append(coded)).append_audio.pcm16 == g711.alaw_to_pcm16(coded)


def _with_input(encoding: str, rate: int) -> cpb.SessionConfig:
    cfg = session_config.defaults("m")
    cfg.input_audio_format.CopyFrom(cpb.AudioFormat(encoding=encoding, sample_rate_hz=rate))
    return cfg


def test_a_refused_update_declares_nothing() -> None:
    t = Translator()
    with pytest.raises(ClientError):
        t.translate(client.update({"input_audio_format": "g711_ulaw", "temperature": "hot"}))
    pcm = client.sine(16000, 80)
    assert t.translate(client.append(pcm)).append_audio.pcm16 == pcm
