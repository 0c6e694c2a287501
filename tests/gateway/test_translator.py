"""Client JSON -> typed ClientCommand: spellings, aliases, validation, audio decoding."""

from __future__ import annotations

import base64
import io
import json
import wave
from typing import Any

import numpy as np
import pytest
from openai._utils import maybe_transform
from openai.types.realtime import RealtimeClientEventParam, SessionUpdateEvent

from antiphon.common import g711
from antiphon.common.audio import float32_to_pcm16
from antiphon.gateway import audio_formats as af
from antiphon.gateway.errors import ClientError
from antiphon.gateway.fields import INT32_MAX
from antiphon.gateway.translator import ALIASES, HANDLERS, Translator, metric_label
from antiphon.session import session_config
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

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


def _wav(pcm16: bytes, rate: int = 16000, *, channels: int = 1) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm16)
    return buf.getvalue()


# The legacy append aliases carry WAV unless the event names a format.
ALIAS_PAYLOAD: dict[str, dict[str, Any]] = {
    "push_chunk": {"chunk": base64.b64encode(_wav(b"\x01\x00" * 8)).decode()},
    "input.audio.append": {"audio": base64.b64encode(_wav(b"\x01\x00" * 8)).decode()},
}


def _b64(pcm: bytes) -> str:
    return base64.b64encode(pcm).decode("ascii")


def _sine(rate: int, samples: int, freq: float = 440.0) -> bytes:
    t = np.arange(samples) / rate
    return float32_to_pcm16(0.5 * np.sin(2 * np.pi * freq * t))


def _append(pcm: bytes, **extra: Any) -> dict[str, Any]:
    return {"type": "input_audio_buffer.append", "audio": _b64(pcm), **extra}


def _update(session: dict[str, Any]) -> dict[str, Any]:
    return {"type": "session.update", "session": session}


def _patch(session: dict[str, Any]) -> cpb.SessionConfigPatch:
    return Translator().translate(_update(session)).update.config


def _refused(event: dict[str, Any], translator: Translator | None = None) -> ClientError:
    with pytest.raises(ClientError) as info:
        (translator or Translator()).translate(event)
    return info.value


def _sdk_wire(event: RealtimeClientEventParam) -> dict[str, Any]:
    """The JSON the official `openai` SDK puts on the socket for a dict event.

    `RealtimeConnection.send` serialises dict events with exactly this
    `json.dumps(maybe_transform(event, RealtimeClientEventParam))`.
    """
    wire = json.loads(json.dumps(maybe_transform(event, RealtimeClientEventParam)))
    # Also a valid event by the SDK's own schema, so the shape is not our guess.
    SessionUpdateEvent.model_validate(wire)
    return wire


# ------------------------------------------------------------- session.update
def test_ga_session_update_from_openai_sdk_maps_every_field() -> None:
    """The GA shape the official SDK sends (session.type, audio.input/output) fills the patch."""
    wire = _sdk_wire(
        {
            "type": "session.update",
            "session": {
                "type": "realtime",
                "model": "gpt-realtime",
                "instructions": "Be brief.",
                "output_modalities": ["audio"],
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "turn_detection": {
                            "type": "server_vad",
                            "threshold": 0.7,
                            "prefix_padding_ms": 200,
                            "silence_duration_ms": 650,
                            "create_response": False,
                            "interrupt_response": True,
                        },
                    },
                    "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin"},
                },
                "max_output_tokens": 120,
            },
        }
    )
    p = Translator().translate(wire).update.config
    assert p.model == "gpt-realtime"
    assert p.instructions == "Be brief."
    assert p.voice == "marin"
    assert p.has_output_modalities and list(p.output_modalities) == ["audio"]
    assert p.input_audio_format == cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000)
    assert p.output_audio_format == cpb.AudioFormat(encoding="pcm16", sample_rate_hz=24000)
    assert p.has_turn_detection
    td = p.turn_detection
    assert td.mode == cpb.TURN_DETECTION_MODE_SERVER_VAD
    assert td.threshold == pytest.approx(0.7)
    assert (td.prefix_padding_ms, td.silence_duration_ms) == (200, 650)
    assert (td.create_response, td.interrupt_response) == (False, True)
    assert p.max_output_tokens == 120


def test_ga_sdk_session_update_with_turn_detection_null_selects_manual_turns() -> None:
    """GA `audio.input.turn_detection: null` (as the SDK sends it) means mode NONE, explicitly."""
    wire = _sdk_wire(
        {
            "type": "session.update",
            "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
        }
    )
    assert wire["session"]["audio"]["input"] == {"turn_detection": None}
    p = Translator().translate(wire).update.config
    assert p.has_turn_detection
    assert p.turn_detection.mode == cpb.TURN_DETECTION_MODE_NONE


def test_beta_session_update_spellings_map_like_ga() -> None:
    """Beta `input_audio_format: "pcm16"`, `modalities`, top-level `turn_detection` and `voice`."""
    p = _patch(
        {
            "modalities": ["audio", "text"],
            "input_audio_format": "pcm16",
            "output_audio_format": "pcm16",
            "sample_rate_hz": 16000,
            "voice": "joe",
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 300},
            "max_response_output_tokens": 64,
            "overlap_policy": "barge_in_on_speech",
            "playback_commit_policy": "ack_only",
            "temperature": 0.6,
        }
    )
    assert p.has_output_modalities and list(p.output_modalities) == ["audio", "text"]
    assert p.input_audio_format == cpb.AudioFormat(encoding="pcm16", sample_rate_hz=16000)
    assert p.output_audio_format.encoding == "pcm16"
    assert p.voice == "joe"
    assert p.has_turn_detection
    assert p.turn_detection.mode == cpb.TURN_DETECTION_MODE_SERVER_VAD
    assert p.turn_detection.silence_duration_ms == 300
    assert p.max_output_tokens == 64
    assert p.overlap_policy == "barge_in_on_speech"
    assert p.playback_commit_policy == "ack_only"
    assert p.temperature == pytest.approx(0.6)


def test_absent_turn_detection_leaves_it_unset_and_null_sets_mode_none() -> None:
    """Absent turn_detection keeps the current one; `null` switches to manual turns."""
    absent = _patch({"instructions": "x"})
    assert not absent.has_turn_detection
    null = _patch({"turn_detection": None})
    assert null.has_turn_detection
    assert null.turn_detection.mode == cpb.TURN_DETECTION_MODE_NONE


def test_server_vad_defaults_create_and_interrupt_response_to_true() -> None:
    """OpenAI's defaults: omitted create_response / interrupt_response are true."""
    td = _patch({"turn_detection": {"type": "server_vad"}}).turn_detection
    assert td.mode == cpb.TURN_DETECTION_MODE_SERVER_VAD
    assert td.create_response and td.interrupt_response


def test_turn_detection_without_type_means_server_vad() -> None:
    td = _patch({"turn_detection": {"threshold": 0.3}}).turn_detection
    assert td.mode == cpb.TURN_DETECTION_MODE_SERVER_VAD
    assert td.threshold == pytest.approx(0.3)


def test_semantic_vad_forwards_eagerness_and_defaults_responses_to_true() -> None:
    """OpenAI's semantic_vad (LiveKit's and the Agents SDK's default) reaches the session,
    which judges `eagerness`; create/interrupt_response default to true as for server_vad."""
    ga = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}
    td = _patch(ga).turn_detection
    assert td.mode == cpb.TURN_DETECTION_MODE_SEMANTIC_VAD
    assert not td.HasField("eagerness")
    assert td.create_response and td.interrupt_response
    td = _patch(
        {
            "turn_detection": {
                "type": "semantic_vad",
                "eagerness": "low",
                "create_response": False,
                "interrupt_response": False,
            }
        }
    ).turn_detection
    assert (td.mode, td.eagerness) == (cpb.TURN_DETECTION_MODE_SEMANTIC_VAD, "low")
    assert not td.create_response and not td.interrupt_response
    err = _refused(_update({"turn_detection": {"type": "semantic_vad", "eagerness": 3}}))
    assert (err.code, err.param) == ("invalid_value", "session.turn_detection.eagerness")


@pytest.mark.parametrize(
    ("session", "param"),
    [
        ({"turn_detection": {"type": "far_field_vad"}}, "session.turn_detection"),
        (
            {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "far_field_vad"}}}},
            "session.audio.input.turn_detection",
        ),
    ],
)
def test_unknown_turn_detection_type_is_refused_with_unsupported_turn_detection(
    session: dict[str, Any], param: str
) -> None:
    err = _refused(_update(session))
    assert err.code == "unsupported_turn_detection"
    assert err.param == param
    assert err.type == "invalid_request_error"


@pytest.mark.parametrize(
    ("td", "param"),
    [
        ({"type": "server_vad", "threshold": "high"}, "session.turn_detection.threshold"),
        (
            {"type": "server_vad", "prefix_padding_ms": -1},
            "session.turn_detection.prefix_padding_ms",
        ),
        (
            {"type": "server_vad", "silence_duration_ms": 2.5},
            "session.turn_detection.silence_duration_ms",
        ),
        ({"type": "server_vad", "create_response": "no"}, "session.turn_detection.create_response"),
        (
            {"type": "server_vad", "interrupt_response": 0},
            "session.turn_detection.interrupt_response",
        ),
        ("server_vad", "session.turn_detection"),
    ],
)
def test_bad_server_vad_params_are_refused_with_their_param(td: Any, param: str) -> None:
    err = _refused(_update({"turn_detection": td}))
    assert err.code == "invalid_value"
    assert err.param == param


def test_non_realtime_session_type_is_refused() -> None:
    err = _refused(_update({"type": "transcription"}))
    assert err.code == "unsupported_session_type"
    assert err.param == "session.type"


@pytest.mark.parametrize(
    ("session", "param"),
    [
        ({"input_audio_format": "opus"}, "session.audio.input.format"),
        ({"input_audio_format": "wav"}, "session.audio.input.format"),
        ({"audio": {"input": {"format": {"type": "audio/opus"}}}}, "session.audio.input.format"),
        ({"output_audio_format": "pcm_f32le"}, "session.audio.output.format"),
        ({"audio": {"output": {"format": {"type": "audio/mp3"}}}}, "session.audio.output.format"),
        (
            {"audio": {"input": {"format": {"type": "audio/pcmu", "rate": 16000}}}},
            "session.audio.input.format.rate",
        ),
        (
            {"audio": {"output": {"format": {"type": "audio/pcma", "rate": 24000}}}},
            "session.audio.output.format.rate",
        ),
        (
            {"input_audio_format": "g711_alaw", "sample_rate_hz": 24000},
            "session.audio.input.format.rate",
        ),
    ],
)
def test_unsupported_audio_formats_are_refused(session: dict[str, Any], param: str) -> None:
    err = _refused(_update(session))
    assert err.code == "unsupported_audio_format"
    assert err.param == param


@pytest.mark.parametrize(
    ("session", "param"),
    [
        ("not an object", "session"),
        ({"instructions": 3}, "session.instructions"),
        ({"model": ["m"]}, "session.model"),
        ({"modalities": "audio"}, "session.output_modalities"),
        ({"output_modalities": [1]}, "session.output_modalities"),
        ({"temperature": "warm"}, "session.temperature"),
        ({"temperature": True}, "session.temperature"),
        ({"max_output_tokens": 0}, "session.max_output_tokens"),
        ({"max_output_tokens": "lots"}, "session.max_output_tokens"),
        ({"audio": []}, "session.audio"),
        ({"audio": {"input": 1}}, "session.audio.input"),
        (
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": "fast"}}}},
            "session.audio.input.format.rate",
        ),
        ({"extra_body": []}, "session.extra_body"),
        ({"extra_body": {"native_duplex": "yes"}}, "session.extra_body.native_duplex"),
        ({"extra_body": {"auto_response": 1}}, "session.extra_body.auto_response"),
    ],
)
def test_wrong_types_in_session_update_are_refused_with_their_param(
    session: Any, param: str
) -> None:
    err = _refused(_update(session))
    assert (err.code, err.param) == ("invalid_value", param)


def test_max_output_tokens_inf_is_sent_as_zero_meaning_the_server_ceiling() -> None:
    for key in ("max_output_tokens", "max_response_output_tokens"):
        patch = _patch({key: "inf"})
        assert patch.HasField("max_output_tokens") and patch.max_output_tokens == 0


def test_max_output_tokens_inf_restores_the_server_default_after_a_limit() -> None:
    """session.update applies every field present: `"inf"` must undo an earlier limit."""
    t = Translator()
    ceiling = 256
    cfg = session_config.defaults("m")
    cfg = session_config.merge(
        cfg,
        t.translate(_update({"max_output_tokens": 40})).update.config,
        max_output_tokens=ceiling,
    )
    assert cfg.max_output_tokens == 40
    cfg = session_config.merge(
        cfg,
        t.translate(_update({"max_output_tokens": "inf"})).update.config,
        max_output_tokens=ceiling,
    )
    assert cfg.max_output_tokens == 0  # 0 = the server's ceiling


@pytest.mark.parametrize("key", ["native_duplex", "minicpmo45_native_duplex"])
@pytest.mark.parametrize("value", [True, False])
def test_extra_body_native_duplex_and_its_alias_set_native_duplex(key: str, value: bool) -> None:
    p = _patch({"extra_body": {key: value}})
    assert p.HasField("native_duplex")
    assert p.native_duplex is value


def test_extra_body_canonical_native_duplex_wins_over_the_alias() -> None:
    p = _patch({"extra_body": {"native_duplex": False, "minicpmo45_native_duplex": True}})
    assert p.native_duplex is False


def test_extra_body_flags_and_absent_optionals_stay_unset() -> None:
    p = _patch({"extra_body": {"auto_response": False, "return_stage_metrics": True}})
    assert p.HasField("auto_response") and p.auto_response is False
    assert p.HasField("return_stage_metrics") and p.return_stage_metrics is True
    for name in ("model", "instructions", "voice", "temperature", "native_duplex", "session_id"):
        assert not p.HasField(name), name
    assert not p.has_output_modalities
    assert not p.HasField("input_audio_format")


# ----------------------------------------------------------------- open()
def test_open_uses_query_params_as_defaults() -> None:
    cmd = Translator().open(
        {"type": "session.update", "event_id": "evt_1", "session": {}},
        {"model": "m-q", "session_id": "sess_q", "native_duplex": "1"},
    )
    assert cmd.WhichOneof("kind") == "open"
    assert cmd.client_type == "session.update"
    assert cmd.event_id == "evt_1"
    cfg = cmd.open.config
    assert (cfg.model, cfg.session_id, cfg.native_duplex) == ("m-q", "sess_q", True)


def test_open_payload_wins_over_query_params() -> None:
    cmd = Translator().open(
        _update({"model": "m-p", "session_id": "sess_p", "extra_body": {"native_duplex": False}}),
        {"model": "m-q", "session_id": "sess_q", "native_duplex": "true"},
    )
    cfg = cmd.open.config
    assert (cfg.model, cfg.session_id, cfg.native_duplex) == ("m-p", "sess_p", False)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"native_duplex": "true"}, True),
        ({"native_duplex": "YES"}, True),
        ({"native_duplex": "0"}, False),
        ({"native_duplex": "false"}, False),
        ({"minicpmo45_native_duplex": "1"}, True),
        ({}, None),
    ],
)
def test_open_native_duplex_query_param_and_alias(
    query: dict[str, str], expected: bool | None
) -> None:
    cfg = Translator().open(_update({}), query).open.config
    if expected is None:
        assert not cfg.HasField("native_duplex")
    else:
        assert cfg.native_duplex is expected


def test_resumable_is_a_session_field_with_a_query_default() -> None:
    assert _patch({"resumable": True}).resumable is True
    assert not _patch({}).HasField("resumable")
    assert Translator().open(_update({}), {"resumable": "1"}).open.config.resumable is True
    assert not Translator().open(_update({}), {}).open.config.HasField("resumable")
    # The payload wins over the URL.
    cfg = Translator().open(_update({"resumable": False}), {"resumable": "1"}).open.config
    assert cfg.HasField("resumable") and cfg.resumable is False
    with pytest.raises(ClientError) as err:
        _patch({"resumable": "yes"})
    assert err.value.param == "session.resumable"


@pytest.mark.parametrize(
    "event",
    [
        _append(b"\x00\x00"),
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
        Translator().open(_update({"turn_detection": {"type": "far_field_vad"}}), {})
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
    assert Translator().open(_update({}), {}).open.on_connect is False


def test_a_dialect_that_takes_fewer_types_refuses_the_others_as_openai_does() -> None:
    openai_only = Translator(frozenset({"session.update", "input_audio_buffer.commit"}))
    assert openai_only.translate({"type": "input_audio_buffer.commit"}).WhichOneof("kind")
    for etype in ("session.heartbeat", "input.commit", "session.resume", "no.such.event", 4):
        err = _refused({"type": etype, "event_id": "evt_x"}, openai_only)
        assert (err.code, err.param, err.type) == ("invalid_value", "type", "invalid_request_error")
        assert err.message == (
            f"Invalid value: {etype!r}. Supported values are: "
            "'input_audio_buffer.commit', 'session.update'."
        )


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
    pcm = _sine(16000, 160)
    cmd = Translator().translate({"type": "push_chunk", "chunk": _b64(_wav(pcm))})
    assert (cmd.append_audio.pcm16, cmd.append_audio.sample_rate_hz) == (pcm, 16000)


@pytest.mark.parametrize("etype", REFERENCE_CLIENT_TYPES + REFERENCE_CLIENT_ALIASES)
def test_every_reference_client_type_translates_to_a_command(etype: str) -> None:
    """Every documented client type and alias is handled: nothing is left "not yet"."""
    if etype == "session.resume":
        # A handshake: valid only as a connection's first event.
        assert _refused({"type": etype}).code == "session_already_open"
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


@pytest.mark.parametrize(
    "event", [{"type": "response.make"}, {"type": "session.updated"}, {"type": "conversation"}]
)
def test_unknown_type_is_invalid_event(event: dict[str, Any]) -> None:
    err = _refused(event)
    assert err.code == "invalid_event"
    assert err.param == "type"


@pytest.mark.parametrize("event", [{}, {"type": ""}, {"type": 7}, {"type": None}])
def test_missing_or_non_string_type_is_invalid_event(event: dict[str, Any]) -> None:
    err = _refused(event)
    assert err.code == "invalid_event"
    assert err.param == "type"


def test_event_id_and_operation_id_are_echoed_into_the_command() -> None:
    cmd = Translator().translate(
        {"type": "input_audio_buffer.commit", "event_id": "evt_42", "operation_id": "op_7"}
    )
    assert (cmd.event_id, cmd.operation_id) == ("evt_42", "op_7")
    bare = Translator().translate({"type": "input_audio_buffer.commit", "event_id": 42})
    assert (bare.event_id, bare.operation_id) == ("", "")


# ------------------------------------------------------------------- append
@pytest.mark.parametrize(
    ("event", "code", "param"),
    [
        ({"audio": "not base64!!"}, "invalid_audio", "audio"),
        ({"audio": "AAE"}, "invalid_audio", "audio"),
        ({"audio": _b64(b"\x00\x01\x02")}, "invalid_audio", "audio"),
        ({}, "missing_required_parameter", "audio"),
        ({"audio": None}, "missing_required_parameter", "audio"),
        ({"audio": 123}, "invalid_value", "audio"),
        ({"audio": [_b64(b"\x00\x00")]}, "invalid_value", "audio"),
        (
            {"audio": _b64(b"\x00\x00"), "sample_rate_hz": 8000},
            "unsupported_audio_format",
            "sample_rate_hz",
        ),
        (
            {"audio": _b64(b"\x00\x00"), "sample_rate_hz": "16000"},
            "invalid_value",
            "sample_rate_hz",
        ),
        ({"audio": _b64(b"\x00\x00"), "is_speech": "yes"}, "invalid_value", "is_speech"),
    ],
)
def test_bad_append_is_refused_with_typed_error(
    event: dict[str, Any], code: str, param: str
) -> None:
    err = _refused({"type": "input_audio_buffer.append", **event})
    assert (err.code, err.param) == (code, param)
    assert err.type == "invalid_request_error"


def test_append_passes_audio_through_unchanged_at_any_supported_rate() -> None:
    """The gateway only decodes base64: the session resamples, in mailbox order."""
    for rate in (16000, 24000):
        pcm = _sine(rate, 1600)
        cmd = Translator().translate(_append(pcm, is_speech=True))
        assert cmd.append_audio.pcm16 == pcm
        assert cmd.append_audio.sample_rate_hz == 0  # = the session's input rate
        assert cmd.append_audio.HasField("is_speech") and cmd.append_audio.is_speech is True
    assert not Translator().translate(_append(pcm)).append_audio.HasField("is_speech")


def test_per_event_sample_rate_rides_the_command() -> None:
    pcm = _sine(16000, 160)
    cmd = Translator().translate(_append(pcm, sample_rate_hz=16000))
    assert (cmd.append_audio.pcm16, cmd.append_audio.sample_rate_hz) == (pcm, 16000)


def test_session_update_with_unsupported_input_rate_is_refused() -> None:
    update = _update({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 8000}}}})
    with pytest.raises(ClientError) as info:
        Translator().translate(update)
    assert info.value.code == "unsupported_audio_format"
    assert info.value.param == "session.audio.input.format.rate"


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
    assert not _patch({"instructions": None}).HasField("instructions")


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
    err = _refused({"type": "response.create", "response": response})
    assert (err.code, err.param) == ("invalid_value", param)


def test_response_cancel_carries_the_response_id() -> None:
    cmd = Translator().translate({"type": "response.cancel", "response_id": "resp_1"})
    assert cmd.cancel_response == spb.CancelResponse(response_id="resp_1")
    err = _refused({"type": "response.cancel", "response_id": 7})
    assert (err.code, err.param) == ("invalid_value", "response_id")


def test_commit_is_speech_false_is_a_silence_declaration() -> None:
    cmd = Translator().translate({"type": "input.commit", "is_speech": False})
    assert cmd.commit.HasField("is_speech") and cmd.commit.is_speech is False
    assert (
        not Translator()
        .translate({"type": "input_audio_buffer.commit"})
        .commit.HasField("is_speech")
    )


# ------------------------------------------------------------ input events
def test_input_cancel_is_a_bare_command() -> None:
    cmd = Translator().translate({"type": "input.cancel", "event_id": "evt_c"})
    assert cmd.WhichOneof("kind") == "cancel_input"
    assert (cmd.client_type, cmd.event_id) == ("input.cancel", "evt_c")


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
    err = _refused({"type": "push_text", **event})
    assert (err.code, err.param, err.type) == (code, "text", "invalid_request_error")


# ------------------------------------------------------ conversation items
def _create(item: Any, **extra: Any) -> spb.ClientCommand:
    return Translator().translate({"type": "conversation.item.create", "item": item, **extra})


def test_item_create_text_message_from_the_reference() -> None:
    cmd = _create(
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Summarise what I said."}],
        },
        previous_item_id=None,
    )
    create = cmd.create_item
    assert create.item == cpb.Item(
        type="message",
        role="user",
        content=[cpb.ContentPart(type="input_text", text="Summarise what I said.")],
    )
    # `previous_item_id: null` appends, exactly like leaving it out.
    assert not create.HasField("previous_item_id")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, None),
        ({"previous_item_id": None}, None),
        ({"previous_item_id": "root"}, ""),
        ({"previous_item_id": "item_9"}, "item_9"),
    ],
)
def test_previous_item_id_absent_null_root_or_an_id(
    extra: dict[str, Any], expected: str | None
) -> None:
    """Absent/null = unset (append at the end); "root" = "" (insert first); else after that id."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    create = _create(item, **extra).create_item
    if expected is None:
        assert not create.HasField("previous_item_id")
    else:
        assert create.HasField("previous_item_id") and create.previous_item_id == expected


@pytest.mark.parametrize("role", ["user", "assistant", "system"])
@pytest.mark.parametrize("part", ["input_text", "text", "output_text"])
def test_every_role_takes_every_text_part(role: str, part: str) -> None:
    item = {"type": "message", "role": role, "content": [{"type": part, "text": "hello"}]}
    made = _create(item).create_item.item
    assert (made.role, made.content[0].type, made.content[0].text) == (role, part, "hello")


def test_item_create_function_call_output_from_the_reference() -> None:
    made = _create(
        {"type": "function_call_output", "call_id": "call_7d1f", "output": '{"temperature_c": 24}'}
    ).create_item.item
    assert made == cpb.Item(
        type="function_call_output", call_id="call_7d1f", output='{"temperature_c": 24}'
    )


def test_item_create_function_call_as_openai_shapes_it() -> None:
    """A tool call of the client's history (LiveKit syncs its chat context so)."""
    item = _create(
        {
            "type": "function_call",
            "name": "get_weather",
            "call_id": "call_7d1f",
            "arguments": '{"city":"Hong Kong"}',
        }
    ).create_item.item
    assert item == cpb.Item(
        type="function_call",
        name="get_weather",
        call_id="call_7d1f",
        arguments='{"city":"Hong Kong"}',
    )
    # OpenAI's call_id is optional: the session names one.
    bare = _create({"type": "function_call", "name": "f", "arguments": ""}).create_item.item
    assert bare.call_id == ""


def test_item_create_keeps_a_client_item_id() -> None:
    item = {
        "id": "item_mine",
        "type": "message",
        "role": "system",
        "content": [{"type": "input_text", "text": "Be terse."}],
    }
    assert _create(item).create_item.item.id == "item_mine"


def test_item_create_input_audio_is_decoded_to_pcm16_in_the_session_format() -> None:
    pcm = _sine(8000, 800)
    ulaw = g711.pcm16_to_ulaw(pcm)
    t = Translator()
    t.translate(_update({"input_audio_format": "g711_ulaw"}))
    part = {"type": "input_audio", "audio": _b64(ulaw), "transcript": "hello"}
    made = t.translate(
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [part]},
        }
    ).create_item.item.content[0]
    assert made.type == "input_audio"
    assert made.audio == g711.ulaw_to_pcm16(ulaw) and made.sample_rate_hz == 8000
    assert made.transcript == "hello"
    # PCM16 (the default) passes through; 0 = the session's input rate.
    only_audio = {"type": "input_audio", "audio": _b64(pcm)}
    item = {"type": "message", "role": "user", "content": [only_audio]}
    plain = _create(item).create_item.item.content[0]
    assert (plain.audio, plain.sample_rate_hz, plain.transcript) == (pcm, 0, "")
    only_text = {"type": "input_audio", "transcript": "said"}
    item = {"type": "message", "role": "user", "content": [only_text]}
    assert _create(item).create_item.item.content[0].transcript == "said"


_USER_TEXT = [{"type": "input_text", "text": "x"}]


@pytest.mark.parametrize(
    ("event", "code", "param"),
    [
        ({}, "missing_required_parameter", "item"),
        ({"item": "text"}, "invalid_value", "item"),
        (
            {"item": {"role": "user", "content": _USER_TEXT}},
            "missing_required_parameter",
            "item.type",
        ),
        ({"item": {"type": "image", "role": "user"}}, "invalid_value", "item.type"),
        ({"item": {"type": "function_call_result"}}, "invalid_value", "item.type"),
        (
            {"item": {"type": "function_call", "arguments": "{}"}},
            "missing_required_parameter",
            "item.name",
        ),
        (
            {"item": {"type": "function_call", "name": "f"}},
            "missing_required_parameter",
            "item.arguments",
        ),
        (
            {"item": {"type": "function_call", "name": "f", "arguments": {"a": 1}}},
            "invalid_value",
            "item.arguments",
        ),
        (
            {"item": {"type": "function_call", "name": "f", "arguments": "", "call_id": 7}},
            "invalid_value",
            "item.call_id",
        ),
        (
            {"item": {"type": "message", "content": _USER_TEXT}},
            "missing_required_parameter",
            "item.role",
        ),
        (
            {"item": {"type": "message", "role": "tool", "content": _USER_TEXT}},
            "invalid_value",
            "item.role",
        ),
        (
            {"item": {"type": "message", "role": "user"}},
            "missing_required_parameter",
            "item.content",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": []}},
            "invalid_value",
            "item.content",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": "hi"}},
            "invalid_value",
            "item.content",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": ["hi"]}},
            "invalid_value",
            "item.content[0]",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": [{"text": "x"}]}},
            "missing_required_parameter",
            "item.content[0].type",
        ),
        (
            {
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [*_USER_TEXT, {"type": "input_text"}],
                }
            },
            "missing_required_parameter",
            "item.content[1].text",
        ),
        (
            {
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": 3}],
                }
            },
            "invalid_value",
            "item.content[0].text",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": [{"type": "input_image"}]}},
            "invalid_value",
            "item.content[0].type",
        ),
        (
            {
                "item": {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "input_audio", "transcript": "x"}],
                }
            },
            "invalid_value",
            "item.content[0].type",
        ),
        (
            {"item": {"type": "message", "role": "user", "content": [{"type": "input_audio"}]}},
            "missing_required_parameter",
            "item.content[0].audio",
        ),
        (
            {
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_audio", "audio": "!!"}],
                }
            },
            "invalid_audio",
            "item.content[0].audio",
        ),
        (
            {
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_audio", "audio": _b64(b"\0")}],
                }
            },
            "invalid_audio",
            "item.content[0].audio",
        ),
        (
            {"item": {"type": "function_call_output", "output": "{}"}},
            "missing_required_parameter",
            "item.call_id",
        ),
        (
            {"item": {"type": "function_call_output", "call_id": "", "output": "{}"}},
            "invalid_value",
            "item.call_id",
        ),
        (
            {"item": {"type": "function_call_output", "call_id": "c"}},
            "missing_required_parameter",
            "item.output",
        ),
        (
            {"item": {"type": "function_call_output", "call_id": "c", "output": {"t": 1}}},
            "invalid_value",
            "item.output",
        ),
        (
            {"item": {"type": "function_call_output", "call_id": "c", "output": "", "id": 4}},
            "invalid_value",
            "item.id",
        ),
        (
            {
                "item": {"type": "function_call_output", "call_id": "c", "output": ""},
                "previous_item_id": 4,
            },
            "invalid_value",
            "previous_item_id",
        ),
        (
            {
                "item": {"type": "function_call_output", "call_id": "c", "output": ""},
                "previous_item_id": "",
            },
            "invalid_value",
            "previous_item_id",
        ),
    ],
)
def test_bad_item_create_is_one_typed_error(event: dict[str, Any], code: str, param: str) -> None:
    err = _refused({"type": "conversation.item.create", "event_id": "evt_i", **event})
    assert (err.code, err.param, err.type) == (code, param, "invalid_request_error")


@pytest.mark.parametrize(
    ("etype", "kind"),
    [("conversation.item.retrieve", "retrieve_item"), ("conversation.item.delete", "delete_item")],
)
def test_item_retrieve_and_delete_name_the_item(etype: str, kind: str) -> None:
    cmd = Translator().translate({"type": etype, "item_id": "item_resp_01"})
    assert getattr(cmd, kind) == spb.ItemRef(item_id="item_resp_01")
    for event, code in (
        ({}, "missing_required_parameter"),
        ({"item_id": ""}, "invalid_value"),
        ({"item_id": 9}, "invalid_value"),
    ):
        err = _refused({"type": etype, **event})
        assert (err.code, err.param) == (code, "item_id")


def test_item_truncate_from_the_reference() -> None:
    cmd = Translator().translate(
        {
            "type": "conversation.item.truncate",
            "item_id": "item_resp_01",
            "content_index": 0,
            "audio_end_ms": 1850,
        }
    )
    assert cmd.truncate_item == spb.TruncateItem(
        item_id="item_resp_01", content_index=0, audio_end_ms=1850
    )


_TRUNCATE = {"item_id": "item_1", "content_index": 0, "audio_end_ms": 10}


@pytest.mark.parametrize(
    ("change", "code", "param"),
    [
        ({"item_id": None}, "missing_required_parameter", "item_id"),
        ({"content_index": None}, "missing_required_parameter", "content_index"),
        ({"audio_end_ms": None}, "missing_required_parameter", "audio_end_ms"),
        ({"content_index": -1}, "invalid_value", "content_index"),
        ({"content_index": 1.0}, "invalid_value", "content_index"),
        ({"content_index": True}, "invalid_value", "content_index"),
        ({"content_index": INT32_MAX + 1}, "invalid_value", "content_index"),
        ({"audio_end_ms": -5}, "invalid_value", "audio_end_ms"),
        ({"audio_end_ms": "1850"}, "invalid_value", "audio_end_ms"),
        ({"audio_end_ms": 2**63}, "invalid_value", "audio_end_ms"),
    ],
)
def test_bad_item_truncate_is_one_typed_error(
    change: dict[str, Any], code: str, param: str
) -> None:
    event = {"type": "conversation.item.truncate", **_TRUNCATE, **change}
    event = {k: v for k, v in event.items() if v is not None}
    err = _refused(event)
    assert (err.code, err.param) == (code, param)


# ----------------------------------------------------- output and overlap
def test_output_audio_buffer_clear_is_a_bare_command() -> None:
    cmd = Translator().translate({"type": "output_audio_buffer.clear"})
    assert cmd.WhichOneof("kind") == "clear_output_audio"


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
        err = _refused({"type": etype, **event})
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
    err = _refused(event)
    assert (err.code, err.param) == (code, param)


@pytest.mark.parametrize(
    ("event", "param"),
    [
        ({"type": "session.event_ack", "server_event_seq": 2**63}, "server_event_seq"),
        (
            {"type": "session.update", "session": {"max_output_tokens": 2**31}},
            "session.max_output_tokens",
        ),
        (
            {"type": "response.create", "response": {"max_output_tokens": 2**40}},
            "response.max_output_tokens",
        ),
        (
            {
                "type": "session.update",
                "session": {"turn_detection": {"silence_duration_ms": 2**31}},
            },
            "session.turn_detection.silence_duration_ms",
        ),
        (
            {"type": "input_audio_buffer.append", "audio": "", "sample_rate_hz": 2**40},
            "sample_rate_hz",
        ),
    ],
)
def test_numbers_past_the_proto_range_are_refused_not_crashed(
    event: dict[str, Any], param: str
) -> None:
    err = _refused(event)
    assert (err.code, err.param) == ("invalid_value", param)


def test_event_ack_needs_its_seq() -> None:
    err = _refused({"type": "session.event_ack"})
    assert (err.code, err.param) == ("missing_required_parameter", "server_event_seq")


# ------------------------------------------------------------ audio formats
@pytest.mark.parametrize("rate", [16000, 24000])
def test_pcm_f32le_append_is_clipped_to_pcm16(rate: int) -> None:
    samples = np.array([0.0, 0.5, -0.5, 1.5, -2.0, np.nan], dtype="<f4")
    cmd = Translator().translate(
        _append(samples.tobytes(), format="pcm_f32le", sample_rate_hz=rate)
    )
    got = np.frombuffer(cmd.append_audio.pcm16, dtype="<i2").tolist()
    assert got == [0, 16384, -16384, 32767, -32768, 0]
    assert cmd.append_audio.sample_rate_hz == rate


def test_pcm_f32le_session_reads_appends_as_float() -> None:
    t = Translator()
    t.translate(_update({"input_audio_format": "pcm_f32le", "sample_rate_hz": 16000}))
    floats = np.full(160, 0.25, dtype="<f4").tobytes()
    append = t.translate(_append(floats)).append_audio
    assert append.pcm16 == float32_to_pcm16(np.full(160, 0.25))
    assert append.sample_rate_hz == 0  # the session's (16 kHz) rate, resampled there


@pytest.mark.parametrize(
    ("session", "encoding"),
    [
        ({"input_audio_format": "g711_ulaw"}, "g711_ulaw"),
        ({"input_audio_format": "g711_alaw"}, "g711_alaw"),
        ({"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}, "g711_ulaw"),
        ({"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcma"}}}}, "g711_alaw"),
    ],
)
def test_g711_session_input_is_8khz_and_appends_decode_from_it(
    session: dict[str, Any], encoding: str
) -> None:
    t = Translator()
    patch = t.translate(_update(session)).update.config
    assert patch.input_audio_format == cpb.AudioFormat(encoding=encoding, sample_rate_hz=8000)
    pcm = _sine(8000, 400)
    coded = g711.pcm16_to_ulaw(pcm) if encoding == "g711_ulaw" else g711.pcm16_to_alaw(pcm)
    append = t.translate(_append(coded)).append_audio
    decoded = af.decode(coded, encoding).pcm16
    assert (append.pcm16, append.sample_rate_hz) == (decoded, 8000)
    # A later update without a format keeps the declared encoding.
    t.translate(_update({"instructions": "x"}))
    assert t.translate(_append(coded)).append_audio.pcm16 == decoded
    # And back to PCM16: raw bytes again.
    t.translate(_update({"input_audio_format": "pcm16"}))
    assert t.translate(_append(pcm)).append_audio.pcm16 == pcm


def test_open_declares_the_input_encoding_too() -> None:
    t = Translator()
    t.open(_update({"input_audio_format": "g711_alaw"}), {})
    coded = g711.pcm16_to_alaw(_sine(8000, 80))
    assert t.translate(_append(coded)).append_audio.sample_rate_hz == 8000


def test_a_resumed_socket_reads_appends_in_the_sessions_input_encoding() -> None:
    """A socket that resumed saw no opening update: the session's config is its word."""
    t = Translator()
    t.adopt(_with_input("g711_ulaw", 8000))
    coded = g711.pcm16_to_ulaw(_sine(8000, 80))
    append = t.translate(_append(coded)).append_audio
    assert (append.pcm16, append.sample_rate_hz) == (g711.ulaw_to_pcm16(coded), 8000)


def test_the_sockets_own_declaration_wins_over_an_adopted_encoding() -> None:
    t = Translator()
    t.translate(_update({"input_audio_format": "g711_alaw"}))
    # Resumed elsewhere by this gateway: the session may not have applied it yet.
    t.adopt(session_config.defaults("m"))
    coded = g711.pcm16_to_alaw(_sine(8000, 80))
    assert t.translate(_append(coded)).append_audio.pcm16 == g711.alaw_to_pcm16(coded)


def _with_input(encoding: str, rate: int) -> cpb.SessionConfig:
    cfg = session_config.defaults("m")
    cfg.input_audio_format.CopyFrom(cpb.AudioFormat(encoding=encoding, sample_rate_hz=rate))
    return cfg


def test_a_refused_update_declares_nothing() -> None:
    t = Translator()
    with pytest.raises(ClientError):
        t.translate(_update({"input_audio_format": "g711_ulaw", "temperature": "hot"}))
    pcm = _sine(16000, 80)
    assert t.translate(_append(pcm)).append_audio.pcm16 == pcm


@pytest.mark.parametrize(
    ("session", "encoding"),
    [
        ({"output_audio_format": "g711_ulaw"}, "g711_ulaw"),
        ({"audio": {"output": {"format": {"type": "audio/pcma"}}}}, "g711_alaw"),
    ],
)
def test_g711_session_output_is_8khz(session: dict[str, Any], encoding: str) -> None:
    patch = _patch(session)
    assert patch.output_audio_format == cpb.AudioFormat(encoding=encoding, sample_rate_hz=8000)


@pytest.mark.parametrize(
    ("fmt", "encode"),
    [
        ("g711_ulaw", g711.pcm16_to_ulaw),
        ("g711_alaw", g711.pcm16_to_alaw),
        ({"type": "audio/pcmu"}, g711.pcm16_to_ulaw),
        ({"type": "audio/pcma", "rate": 8000}, g711.pcm16_to_alaw),
    ],
)
def test_per_event_g711_format_overrides_the_session(fmt: Any, encode: Any) -> None:
    pcm = _sine(8000, 240)
    append = Translator().translate(_append(encode(pcm), format=fmt)).append_audio
    assert append.sample_rate_hz == 8000
    assert len(append.pcm16) == len(pcm)


def test_per_event_format_also_reads_input_audio_format() -> None:
    floats = np.zeros(10, dtype="<f4").tobytes()
    append = Translator().translate(_append(floats, input_audio_format="pcm_f32le")).append_audio
    assert append.pcm16 == b"\x00\x00" * 10


@pytest.mark.parametrize("etype", ["push_chunk", "input.audio.append"])
@pytest.mark.parametrize("rate", [8000, 16000, 44100])
def test_legacy_aliases_default_to_wav_and_take_its_rate(etype: str, rate: int) -> None:
    pcm = _sine(rate, rate // 10)
    cmd = Translator().translate({"type": etype, "audio": _b64(_wav(pcm, rate))})
    assert (cmd.append_audio.pcm16, cmd.append_audio.sample_rate_hz) == (pcm, rate)


def test_legacy_alias_with_a_format_is_not_wav() -> None:
    pcm = _sine(16000, 160)
    cmd = Translator().translate({"type": "push_chunk", "chunk": _b64(pcm), "format": "pcm16"})
    assert cmd.append_audio.pcm16 == pcm


def test_canonical_append_takes_wav_when_it_says_so() -> None:
    pcm = _sine(22050, 2205)
    append = Translator().translate(_append(_wav(pcm, 22050), format="wav")).append_audio
    assert (append.pcm16, append.sample_rate_hz) == (pcm, 22050)
    same = Translator().translate(_append(_wav(pcm, 22050), format="wav", sample_rate_hz=22050))
    assert same.append_audio.sample_rate_hz == 22050


@pytest.mark.parametrize(
    ("extra", "code", "param"),
    [
        ({"format": "opus"}, "unsupported_audio_format", "format"),
        ({"format": {"type": "audio/aac"}}, "unsupported_audio_format", "format"),
        ({"format": 16}, "invalid_value", "format"),
        ({"format": {"type": "audio/pcm", "rate": "x"}}, "invalid_value", "format.rate"),
        (
            {"format": {"type": "audio/pcm", "rate": 8000}},
            "unsupported_audio_format",
            "format.rate",
        ),
        (
            {"format": "g711_ulaw", "sample_rate_hz": 16000},
            "unsupported_audio_format",
            "sample_rate_hz",
        ),
        (
            {"format": "pcm_f32le", "sample_rate_hz": 8000},
            "unsupported_audio_format",
            "sample_rate_hz",
        ),
        (
            {"format": {"type": "audio/pcm", "rate": 16000}, "sample_rate_hz": 24000},
            "invalid_value",
            "sample_rate_hz",
        ),
        ({"format": "pcm_f32le"}, "invalid_audio", "audio"),  # 6 bytes: not whole floats
        ({"format": "wav"}, "invalid_audio", "audio"),  # no RIFF header
    ],
)
def test_bad_per_event_formats_are_refused(extra: dict[str, Any], code: str, param: str) -> None:
    err = _refused(_append(b"\x00" * 6, **extra))
    assert (err.code, err.param) == (code, param)


def test_wav_rate_must_agree_with_sample_rate_hz() -> None:
    err = _refused(_append(_wav(b"\x00\x00" * 8, 16000), format="wav", sample_rate_hz=24000))
    assert (err.code, err.param) == ("invalid_value", "sample_rate_hz")


@pytest.mark.parametrize(
    ("wav_bytes", "code"),
    [
        (_wav(b"\x00\x00" * 8, 16000, channels=2), "unsupported_audio_format"),
        (_wav(b"\x00\x00" * 8, 12345), "unsupported_audio_format"),
        (b"RIFF\x00\x00\x00\x00WAVE", "invalid_audio"),
        (b"RIFF\x00\x00\x00\x00WAVEdata\x02\x00\x00\x00\x00\x00", "invalid_audio"),
    ],
)
def test_bad_wav_is_refused(wav_bytes: bytes, code: str) -> None:
    err = _refused({"type": "push_chunk", "chunk": _b64(wav_bytes)})
    assert (err.code, err.param) == (code, "audio")


def test_legacy_raw_pcm_without_format_is_refused_as_not_wav() -> None:
    err = _refused({"type": "push_chunk", "chunk": _b64(b"\x02\x00" * 4)})
    assert (err.code, err.param) == ("invalid_audio", "audio")


def test_speed_and_truncation_are_read_in_openai_s_spellings() -> None:
    t = Translator()
    cmd = t.translate(
        {
            "type": "session.update",
            "session": {
                "audio": {"output": {"speed": 1.2}},
                "truncation": {"type": "retention_ratio", "retention_ratio": 0.6},
            },
        }
    )
    patch = cmd.update.config
    assert patch.speed == pytest.approx(1.2)
    assert (patch.truncation.type, patch.truncation.retention_ratio) == (
        "retention_ratio",
        pytest.approx(0.6),
    )
    auto = t.translate({"type": "session.update", "session": {"truncation": "disabled"}})
    assert auto.update.config.truncation.type == "disabled"
    with pytest.raises(ClientError):
        t.translate({"type": "session.update", "session": {"audio": {"output": {"speed": "x"}}}})
