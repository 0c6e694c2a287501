"""Session config: defaults, merging a patch whole-or-nothing, server-owned limits, lanes."""

from __future__ import annotations

from typing import Any

import pytest

from antiphon.common.audio_formats import PCM_INPUT_RATES
from antiphon.gateway.translate.translator import Translator
from antiphon.session.config import session_config
from antiphon.session.config.session_config import (
    AUTO_RETENTION,
    ConfigError,
    defaults,
    lane,
    merge,
    retention_ratio,
)
from antiphon.v1 import common_pb2 as pb
from antiphon.v1 import stage_pb2

CEILING = 256


def _merge(
    patch: pb.SessionConfigPatch, current: pb.SessionConfig | None = None
) -> pb.SessionConfig:
    return merge(current or defaults("m"), patch, max_output_tokens=CEILING)


def _from_wire(session: dict[str, Any]) -> pb.SessionConfigPatch:
    """The patch the gateway builds from a client's `session.update`."""
    return Translator().translate({"type": "session.update", "session": session}).update.config


def test_defaults_are_valid_and_openai_like() -> None:
    cfg = defaults("antiphon-cascade")
    session_config.validate(cfg)
    assert cfg.model == "antiphon-cascade"
    assert cfg.turn_detection.mode == pb.TURN_DETECTION_MODE_SERVER_VAD
    assert cfg.input_audio_format == pb.AudioFormat(encoding="pcm16", sample_rate_hz=24000)
    assert cfg.output_audio_format == pb.AudioFormat(encoding="pcm16", sample_rate_hz=24000)
    assert list(cfg.output_modalities) == ["audio"]
    assert cfg.max_output_tokens == 0  # "inf": the server's default


def test_empty_patch_changes_nothing() -> None:
    current = defaults("m")
    assert _merge(pb.SessionConfigPatch(), current) == current


def test_merge_keeps_every_unset_field() -> None:
    current = defaults("m")
    current.voice = "amy"
    current.temperature = 0.4
    current.native_duplex = True
    out = _merge(pb.SessionConfigPatch(instructions="Speak French."), current)
    expected = pb.SessionConfig()
    expected.CopyFrom(current)
    expected.instructions = "Speak French."
    assert out == expected


def test_explicit_false_and_zero_values_are_applied() -> None:
    """Optional patch fields distinguish "not sent" from false/zero."""
    current = defaults("m")
    current.native_duplex = True
    current.temperature = 0.8
    out = _merge(
        pb.SessionConfigPatch(native_duplex=False, auto_response=False, temperature=0.0), current
    )
    assert (out.native_duplex, out.auto_response, out.temperature) == (False, False, 0.0)


def test_sessions_are_not_resumable_after_a_clean_close_unless_they_say_so() -> None:
    """Stock clients close with 1000 when done: their session ends then. Opting
    in (or back out) is an ordinary update, kept until changed."""
    assert defaults("m").resumable is False
    on = _merge(pb.SessionConfigPatch(resumable=True), defaults("m"))
    assert on.resumable is True
    assert _merge(pb.SessionConfigPatch(instructions="x"), on).resumable is True
    assert _merge(pb.SessionConfigPatch(resumable=False), on).resumable is False


def test_merge_does_not_mutate_its_input() -> None:
    current = defaults("m")
    before = current.SerializeToString(deterministic=True)
    _merge(
        pb.SessionConfigPatch(
            instructions="x", has_output_modalities=True, output_modalities=["text"]
        ),
        current,
    )
    assert current.SerializeToString(deterministic=True) == before


def test_output_modalities_replace_only_when_flagged() -> None:
    unflagged = _merge(pb.SessionConfigPatch(output_modalities=["text"]))
    assert list(unflagged.output_modalities) == ["audio"]
    flagged = _merge(pb.SessionConfigPatch(output_modalities=["text"], has_output_modalities=True))
    assert list(flagged.output_modalities) == ["text"]


def test_partial_audio_format_patch_keeps_the_other_part() -> None:
    out = _merge(pb.SessionConfigPatch(input_audio_format=pb.AudioFormat(sample_rate_hz=16000)))
    assert out.input_audio_format == pb.AudioFormat(encoding="pcm16", sample_rate_hz=16000)


def test_turn_detection_null_switches_to_manual_and_absent_keeps_it() -> None:
    manual = _merge(
        pb.SessionConfigPatch(
            has_turn_detection=True,
            turn_detection=pb.TurnDetection(mode=pb.TURN_DETECTION_MODE_NONE),
        )
    )
    assert manual.turn_detection.mode == pb.TURN_DETECTION_MODE_NONE
    # A later patch without turn_detection leaves manual mode alone.
    kept = _merge(pb.SessionConfigPatch(instructions="x"), manual)
    assert kept.turn_detection.mode == pb.TURN_DETECTION_MODE_NONE


def test_server_vad_patch_fills_unset_params_with_defaults() -> None:
    out = _merge(
        pb.SessionConfigPatch(
            has_turn_detection=True,
            turn_detection=pb.TurnDetection(
                mode=pb.TURN_DETECTION_MODE_SERVER_VAD,
                silence_duration_ms=800,
                create_response=True,
            ),
        ),
        _merge(_from_wire({"turn_detection": None})),
    )
    td = out.turn_detection
    assert td.mode == pb.TURN_DETECTION_MODE_SERVER_VAD
    assert td.silence_duration_ms == 800
    assert td.threshold == pytest.approx(0.5)
    assert td.prefix_padding_ms == 300


def test_semantic_vad_from_the_wire_defaults_to_auto_and_replaces_server_vad_params() -> None:
    """LiveKit's and the Agents SDK's default: eagerness `auto`, responses on, no VAD knobs."""
    out = _merge(_from_wire({"turn_detection": {"type": "semantic_vad"}}))
    td = out.turn_detection
    assert td.mode == pb.TURN_DETECTION_MODE_SEMANTIC_VAD
    assert (td.eagerness, td.create_response, td.interrupt_response) == ("auto", True, True)
    assert not td.HasField("silence_duration_ms") and not td.HasField("threshold")
    low = _merge(_from_wire({"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}), out)
    assert low.turn_detection.eagerness == "low"


@pytest.mark.parametrize("eagerness", session_config.EAGERNESS)
def test_every_openai_eagerness_is_accepted(eagerness: str) -> None:
    wire = {"turn_detection": {"type": "semantic_vad", "eagerness": eagerness}}
    assert _merge(_from_wire(wire)).turn_detection.eagerness == eagerness


def test_explicit_zero_prefix_padding_is_kept() -> None:
    """`prefix_padding_ms: 0` is a valid client choice (no pre-roll), not "unset"."""
    out = _merge(_from_wire({"turn_detection": {"type": "server_vad", "prefix_padding_ms": 0}}))
    assert out.turn_detection.prefix_padding_ms == 0


# ------------------------------------------------------------ server limits
@pytest.mark.parametrize(
    ("asked", "effective"), [(10_000, CEILING), (CEILING, CEILING), (40, 40), (1, 1)]
)
def test_clients_cannot_raise_max_output_tokens_above_the_server_ceiling(
    asked: int, effective: int
) -> None:
    out = _merge(pb.SessionConfigPatch(max_output_tokens=asked))
    assert out.max_output_tokens == effective


def test_max_output_tokens_from_the_wire_is_clamped_too() -> None:
    out = _merge(_from_wire({"max_response_output_tokens": 4096}))
    assert out.max_output_tokens == CEILING


# --------------------------------------------------------------- rejection
REJECTED: list[tuple[pb.SessionConfigPatch, str, str]] = [
    (pb.SessionConfigPatch(max_output_tokens=-5), "invalid_value", "max_output_tokens"),
    (pb.SessionConfigPatch(temperature=2.5), "invalid_value", "temperature"),
    (pb.SessionConfigPatch(temperature=-0.1), "invalid_value", "temperature"),
    (
        pb.SessionConfigPatch(has_output_modalities=True, output_modalities=["video"]),
        "invalid_value",
        "output_modalities",
    ),
    (
        pb.SessionConfigPatch(has_output_modalities=True, output_modalities=[]),
        "invalid_value",
        "output_modalities",
    ),
    (
        pb.SessionConfigPatch(input_audio_format=pb.AudioFormat(sample_rate_hz=8000)),
        "unsupported_audio_format",
        "audio.input.format.rate",
    ),
    (
        pb.SessionConfigPatch(input_audio_format=pb.AudioFormat(sample_rate_hz=44100)),
        "unsupported_audio_format",
        "audio.input.format.rate",
    ),
    (
        pb.SessionConfigPatch(input_audio_format=pb.AudioFormat(encoding="opus")),
        "unsupported_audio_format",
        "input_audio_format",
    ),
    (
        pb.SessionConfigPatch(
            input_audio_format=pb.AudioFormat(encoding="g711_ulaw", sample_rate_hz=16000)
        ),
        "unsupported_audio_format",
        "audio.input.format.rate",
    ),
    (
        pb.SessionConfigPatch(
            input_audio_format=pb.AudioFormat(encoding="pcm_f32le", sample_rate_hz=8000)
        ),
        "unsupported_audio_format",
        "audio.input.format.rate",
    ),
    (
        pb.SessionConfigPatch(
            output_audio_format=pb.AudioFormat(encoding="g711_alaw", sample_rate_hz=24000)
        ),
        "unsupported_audio_format",
        "audio.output.format",
    ),
    (
        pb.SessionConfigPatch(output_audio_format=pb.AudioFormat(sample_rate_hz=16000)),
        "unsupported_audio_format",
        "audio.output.format",
    ),
    (
        pb.SessionConfigPatch(output_audio_format=pb.AudioFormat(encoding="pcm_f32le")),
        "unsupported_audio_format",
        "audio.output.format",
    ),
    (pb.SessionConfigPatch(overlap_policy="shout"), "invalid_value", "overlap_policy"),
    (
        pb.SessionConfigPatch(playback_commit_policy="never"),
        "invalid_value",
        "playback_commit_policy",
    ),
    (
        pb.SessionConfigPatch(
            has_turn_detection=True,
            turn_detection=pb.TurnDetection(mode=pb.TURN_DETECTION_MODE_SERVER_VAD, threshold=1.5),
        ),
        "invalid_value",
        "turn_detection.threshold",
    ),
    (
        pb.SessionConfigPatch(
            has_turn_detection=True,
            turn_detection=pb.TurnDetection(
                mode=pb.TURN_DETECTION_MODE_SERVER_VAD, silence_duration_ms=-1
            ),
        ),
        "invalid_value",
        "turn_detection",
    ),
    (
        pb.SessionConfigPatch(
            has_turn_detection=True,
            turn_detection=pb.TurnDetection(
                mode=pb.TURN_DETECTION_MODE_SEMANTIC_VAD, eagerness="eager"
            ),
        ),
        "invalid_value",
        "turn_detection.eagerness",
    ),
]


@pytest.mark.parametrize(("patch", "code", "param"), REJECTED)
def test_rejected_patch_raises_config_error_with_param_and_changes_nothing(
    patch: pb.SessionConfigPatch, code: str, param: str
) -> None:
    current = defaults("m")
    current.instructions = "keep me"
    before = current.SerializeToString(deterministic=True)
    with pytest.raises(ConfigError) as info:
        _merge(patch, current)
    assert (info.value.code, info.value.param) == (code, param)
    assert current.SerializeToString(deterministic=True) == before


def test_a_valid_field_next_to_an_invalid_one_is_not_applied() -> None:
    """Validation is of the merged result whole: nothing of a rejected patch lands."""
    current = defaults("m")
    patch = pb.SessionConfigPatch(instructions="new", voice="amy", temperature=9.0)
    with pytest.raises(ConfigError):
        _merge(patch, current)
    assert current.instructions == session_config.DEFAULT_INSTRUCTIONS
    assert current.voice == "joe"


def test_16k_and_24k_input_rates_are_accepted() -> None:
    for encoding in ("pcm16", "pcm_f32le"):
        for rate in PCM_INPUT_RATES:
            fmt = pb.AudioFormat(encoding=encoding, sample_rate_hz=rate)
            out = _merge(pb.SessionConfigPatch(input_audio_format=fmt))
            assert out.input_audio_format == fmt


@pytest.mark.parametrize("encoding", ["g711_ulaw", "g711_alaw"])
def test_g711_means_8khz_in_and_out(encoding: str) -> None:
    """Naming G.711 alone sets 8 kHz; leaving it for PCM16 returns to 24 kHz."""
    g711 = _merge(
        pb.SessionConfigPatch(
            input_audio_format=pb.AudioFormat(encoding=encoding),
            output_audio_format=pb.AudioFormat(encoding=encoding),
        )
    )
    assert g711.input_audio_format == pb.AudioFormat(encoding=encoding, sample_rate_hz=8000)
    assert g711.output_audio_format == pb.AudioFormat(encoding=encoding, sample_rate_hz=8000)
    back = _merge(
        pb.SessionConfigPatch(
            input_audio_format=pb.AudioFormat(encoding="pcm16"),
            output_audio_format=pb.AudioFormat(encoding="pcm16"),
        ),
        g711,
    )
    assert back.input_audio_format == pb.AudioFormat(encoding="pcm16", sample_rate_hz=24000)
    assert back.output_audio_format == pb.AudioFormat(encoding="pcm16", sample_rate_hz=24000)


def test_pcm16_to_f32_keeps_the_declared_rate() -> None:
    at16k = _merge(pb.SessionConfigPatch(input_audio_format=pb.AudioFormat(sample_rate_hz=16000)))
    f32 = _merge(
        pb.SessionConfigPatch(input_audio_format=pb.AudioFormat(encoding="pcm_f32le")), at16k
    )
    assert f32.input_audio_format == pb.AudioFormat(encoding="pcm_f32le", sample_rate_hz=16000)


@pytest.mark.parametrize(
    ("session", "encoding"),
    [
        ({"input_audio_format": "g711_ulaw", "output_audio_format": "g711_ulaw"}, "g711_ulaw"),
        (
            {
                "type": "realtime",
                "audio": {
                    "input": {"format": {"type": "audio/pcma"}},
                    "output": {"format": {"type": "audio/pcma"}},
                },
            },
            "g711_alaw",
        ),
    ],
)
def test_g711_sessions_from_the_wire(session: dict[str, Any], encoding: str) -> None:
    out = _merge(_from_wire(session))
    assert out.input_audio_format == pb.AudioFormat(encoding=encoding, sample_rate_hz=8000)
    assert out.output_audio_format == pb.AudioFormat(encoding=encoding, sample_rate_hz=8000)


# -------------------------------------------------------------------- lanes
def test_lane_native_duplex_wins_over_turn_detection() -> None:
    cfg = defaults("m")
    cfg.native_duplex = True
    assert lane(cfg) == stage_pb2.LANE_NATIVE
    cfg.turn_detection.mode = pb.TURN_DETECTION_MODE_NONE
    assert lane(cfg) == stage_pb2.LANE_NATIVE


def test_lane_server_vad_and_manual() -> None:
    cfg = defaults("m")
    assert lane(cfg) == stage_pb2.LANE_SERVER_VAD
    cfg.turn_detection.mode = pb.TURN_DETECTION_MODE_NONE
    assert lane(cfg) == stage_pb2.LANE_MANUAL


def test_lanes_from_client_updates() -> None:
    assert lane(_merge(_from_wire({"turn_detection": None}))) == stage_pb2.LANE_MANUAL
    assert lane(_merge(_from_wire({}))) == stage_pb2.LANE_SERVER_VAD
    # The session runs semantic_vad as server_vad; only stage0's end-of-turn rule differs.
    semantic = _from_wire({"turn_detection": {"type": "semantic_vad"}})
    assert lane(_merge(semantic)) == stage_pb2.LANE_SERVER_VAD
    assert (
        lane(_merge(_from_wire({"extra_body": {"native_duplex": True}}))) == stage_pb2.LANE_NATIVE
    )


def test_max_output_tokens_zero_means_the_server_ceiling() -> None:
    """0 is what the gateway sends for "inf": back to the ceiling, after any lower limit."""
    limited = _merge(pb.SessionConfigPatch(max_output_tokens=40))
    assert _merge(pb.SessionConfigPatch(max_output_tokens=0), limited).max_output_tokens == 0


def test_openai_voice_names_are_taken_and_the_speaking_voice_reported() -> None:
    for name in ("alloy", "marin", "joe"):
        cfg = merge(defaults(), pb.SessionConfigPatch(voice=name), max_output_tokens=256)
        assert cfg.voice == "joe"
    with pytest.raises(ConfigError) as bad:
        merge(defaults(), pb.SessionConfigPatch(voice="hal9000"), max_output_tokens=256)
    assert bad.value.param == "audio.output.voice"


def test_speed_and_truncation_are_validated_whole() -> None:
    cfg = merge(
        defaults(),
        pb.SessionConfigPatch(
            speed=1.25, truncation=pb.Truncation(type="retention_ratio", retention_ratio=0.5)
        ),
        max_output_tokens=256,
    )
    assert cfg.speed == 1.25 and retention_ratio(cfg) == 0.5
    assert retention_ratio(defaults()) == AUTO_RETENTION
    off = merge(
        defaults(),
        pb.SessionConfigPatch(truncation=pb.Truncation(type="disabled")),
        max_output_tokens=256,
    )
    assert retention_ratio(off) == 0.0
    for patch, param in (
        (pb.SessionConfigPatch(speed=3.0), "audio.output.speed"),
        (pb.SessionConfigPatch(truncation=pb.Truncation(type="sometimes")), "truncation"),
        (
            pb.SessionConfigPatch(truncation=pb.Truncation(type="retention_ratio")),
            "truncation.retention_ratio",
        ),
    ):
        with pytest.raises(ConfigError) as bad:
            merge(defaults(), patch, max_output_tokens=256)
        assert bad.value.param == param
