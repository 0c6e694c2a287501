"""Client JSON -> typed ClientCommand: spellings, aliases, validation, audio decoding."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest
from openai._utils import maybe_transform
from openai.types.realtime import RealtimeClientEventParam, SessionUpdateEvent

from antiphon.common.audio import float32_to_pcm16
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translator import ALIASES, NOT_YET, Translator
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
    "response.create": ({}, "create_response"),
    "response.cancel": ({}, "cancel_response"),
    "session.close": ({}, "close"),
    "session.heartbeat": ({}, "heartbeat"),
    "session.event_ack": ({"server_event_seq": 3}, "event_ack"),
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


@pytest.mark.parametrize(
    ("session", "param"),
    [
        ({"turn_detection": {"type": "semantic_vad"}}, "session.turn_detection"),
        (
            {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}},
            "session.audio.input.turn_detection",
        ),
    ],
)
def test_semantic_vad_is_refused_with_unsupported_turn_detection(
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
        ({"input_audio_format": "g711_ulaw"}, "session.audio.input.format"),
        ({"audio": {"input": {"format": {"type": "audio/pcmu"}}}}, "session.audio.input.format"),
        ({"audio": {"output": {"format": {"type": "audio/pcma"}}}}, "session.audio.output.format"),
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
        Translator().open(_update({"turn_detection": {"type": "semantic_vad"}}), {})
    assert info.value.code == "unsupported_turn_detection"


# ------------------------------------------------------- types and aliases
@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_every_alias_translates_to_its_canonical_command(alias: str) -> None:
    canonical = ALIASES[alias]
    payload, kind = CANONICAL[canonical]
    cmd = Translator().translate({"type": alias, **payload})
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
    cmd = Translator().translate({"type": "push_chunk", "chunk": _b64(b"\x02\x00")})
    assert cmd.append_audio.pcm16 == b"\x02\x00"


@pytest.mark.parametrize("etype", sorted(NOT_YET))
def test_not_yet_types_are_refused_as_unsupported_event(etype: str) -> None:
    err = _refused({"type": etype})
    assert err.code == "unsupported_event"
    assert err.param == "type"


@pytest.mark.parametrize("etype", REFERENCE_CLIENT_TYPES + REFERENCE_CLIENT_ALIASES)
def test_every_reference_client_type_is_known(etype: str) -> None:
    """Every documented client type is either translated or refused as not-yet-supported."""
    known = set(CANONICAL) | set(ALIASES) | set(NOT_YET) | {"session.resume"}
    assert etype in known
    payload = CANONICAL.get(ALIASES.get(etype, etype), ({}, ""))[0]
    try:
        Translator().translate({"type": etype, **payload})
    except ClientError as err:
        # session.resume is a handshake: valid only as a connection's first event.
        assert err.code == (
            "session_already_open" if etype == "session.resume" else "unsupported_event"
        )


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
        ({}, "invalid_value", "audio"),
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
