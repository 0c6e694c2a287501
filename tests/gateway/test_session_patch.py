"""A client's session object -> the typed configuration patch (`session_patch`):
GA and beta spellings, turn detection, formats, limits, extensions and URL query defaults."""

from __future__ import annotations

from typing import Any

import pytest

from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate.translator import Translator
from antiphon.session.config import session_config
from antiphon.v1 import common_pb2 as cpb
from tests.gateway import client_events as client


# ------------------------------------------------------------- session.update
def test_ga_session_update_from_openai_sdk_maps_every_field() -> None:
    """The GA shape the official SDK sends (session.type, audio.input/output) fills the patch."""
    wire = client.sdk_wire(
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
    wire = client.sdk_wire(
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
    p = client.patch(
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
    absent = client.patch({"instructions": "x"})
    assert not absent.has_turn_detection
    null = client.patch({"turn_detection": None})
    assert null.has_turn_detection
    assert null.turn_detection.mode == cpb.TURN_DETECTION_MODE_NONE


def test_server_vad_defaults_create_and_interrupt_response_to_true() -> None:
    """OpenAI's defaults: omitted create_response / interrupt_response are true."""
    td = client.patch({"turn_detection": {"type": "server_vad"}}).turn_detection
    assert td.mode == cpb.TURN_DETECTION_MODE_SERVER_VAD
    assert td.create_response and td.interrupt_response


def test_turn_detection_without_type_means_server_vad() -> None:
    td = client.patch({"turn_detection": {"threshold": 0.3}}).turn_detection
    assert td.mode == cpb.TURN_DETECTION_MODE_SERVER_VAD
    assert td.threshold == pytest.approx(0.3)


def test_semantic_vad_forwards_eagerness_and_defaults_responses_to_true() -> None:
    """OpenAI's semantic_vad (LiveKit's and the Agents SDK's default) reaches the session,
    which judges `eagerness`; create/interrupt_response default to true as for server_vad."""
    ga = {"type": "realtime", "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}
    td = client.patch(ga).turn_detection
    assert td.mode == cpb.TURN_DETECTION_MODE_SEMANTIC_VAD
    assert not td.HasField("eagerness")
    assert td.create_response and td.interrupt_response
    td = client.patch(
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
    err = client.refused(
        client.update({"turn_detection": {"type": "semantic_vad", "eagerness": 3}})
    )
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
    err = client.refused(client.update(session))
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
    err = client.refused(client.update({"turn_detection": td}))
    assert err.code == "invalid_value"
    assert err.param == param


def test_non_realtime_session_type_is_refused() -> None:
    err = client.refused(client.update({"type": "transcription"}))
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
    err = client.refused(client.update(session))
    assert err.code == "unsupported_audio_format"
    assert err.param == param


def test_session_update_with_unsupported_input_rate_is_refused() -> None:
    update = client.update({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 8000}}}})
    with pytest.raises(ClientError) as info:
        Translator().translate(update)
    assert info.value.code == "unsupported_audio_format"
    assert info.value.param == "session.audio.input.format.rate"


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
    err = client.refused(client.update(session))
    assert (err.code, err.param) == ("invalid_value", param)


def test_max_output_tokens_inf_is_sent_as_zero_meaning_the_server_ceiling() -> None:
    for key in ("max_output_tokens", "max_response_output_tokens"):
        patch = client.patch({key: "inf"})
        assert patch.HasField("max_output_tokens") and patch.max_output_tokens == 0


def test_max_output_tokens_inf_restores_the_server_default_after_a_limit() -> None:
    """session.update applies every field present: `"inf"` must undo an earlier limit."""
    t = Translator()
    ceiling = 256
    cfg = session_config.defaults("m")
    cfg = session_config.merge(
        cfg,
        t.translate(client.update({"max_output_tokens": 40})).update.config,
        max_output_tokens=ceiling,
    )
    assert cfg.max_output_tokens == 40
    cfg = session_config.merge(
        cfg,
        t.translate(client.update({"max_output_tokens": "inf"})).update.config,
        max_output_tokens=ceiling,
    )
    assert cfg.max_output_tokens == 0  # 0 = the server's ceiling


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


@pytest.mark.parametrize("key", ["native_duplex", "minicpmo45_native_duplex"])
@pytest.mark.parametrize("value", [True, False])
def test_extra_body_native_duplex_and_its_alias_set_native_duplex(key: str, value: bool) -> None:
    p = client.patch({"extra_body": {key: value}})
    assert p.HasField("native_duplex")
    assert p.native_duplex is value


def test_extra_body_canonical_native_duplex_wins_over_the_alias() -> None:
    p = client.patch({"extra_body": {"native_duplex": False, "minicpmo45_native_duplex": True}})
    assert p.native_duplex is False


def test_extra_body_flags_and_absent_optionals_stay_unset() -> None:
    p = client.patch({"extra_body": {"auto_response": False, "return_stage_metrics": True}})
    assert p.HasField("auto_response") and p.auto_response is False
    assert p.HasField("return_stage_metrics") and p.return_stage_metrics is True
    for name in ("model", "instructions", "voice", "temperature", "native_duplex", "session_id"):
        assert not p.HasField(name), name
    assert not p.has_output_modalities
    assert not p.HasField("input_audio_format")


# ------------------------------------------------- URL query defaults (open)
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
        client.update(
            {"model": "m-p", "session_id": "sess_p", "extra_body": {"native_duplex": False}}
        ),
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
    cfg = Translator().open(client.update({}), query).open.config
    if expected is None:
        assert not cfg.HasField("native_duplex")
    else:
        assert cfg.native_duplex is expected


def test_resumable_is_a_session_field_with_a_query_default() -> None:
    assert client.patch({"resumable": True}).resumable is True
    assert not client.patch({}).HasField("resumable")
    assert Translator().open(client.update({}), {"resumable": "1"}).open.config.resumable is True
    assert not Translator().open(client.update({}), {}).open.config.HasField("resumable")
    # The payload wins over the URL.
    cfg = Translator().open(client.update({"resumable": False}), {"resumable": "1"}).open.config
    assert cfg.HasField("resumable") and cfg.resumable is False
    with pytest.raises(ClientError) as err:
        client.patch({"resumable": "yes"})
    assert err.value.param == "session.resumable"
