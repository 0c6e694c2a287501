"""The session's effective configuration: defaults, merging a patch, validation.

A `session.update` is merged onto a copy and validated whole; only a fully
valid result replaces the stored config, so a rejected update changes
nothing. Server-owned limits clamp what a client asks for.
"""

from __future__ import annotations

from antiphon.common.audio_formats import (
    G711,
    G711_RATE,
    INPUT_ENCODINGS,
    OUTPUT_ENCODINGS,
    PCM16,
    PCM_INPUT_RATES,
    PCM_OUTPUT_RATE,
    allowed_rates,
)
from antiphon.session.config import tools
from antiphon.v1 import common_pb2 as pb
from antiphon.v1 import stage_pb2

# A session's PCM input rate until it declares another (OpenAI's 24 kHz).
DEFAULT_PCM_RATE = PCM_OUTPUT_RATE
# What a session reports as its model when the client names none.
DEFAULT_MODEL = "antiphon-cascade"
MODALITIES = ("audio", "text")
OVERLAP_POLICIES = ("listen_only", "barge_in_on_speech")
PLAYBACK_POLICIES = ("ack_only", "commit_all_on_done")
# semantic_vad's `eagerness` (stage0's turn.py maps each to its rule); `auto` = medium.
EAGERNESS = ("low", "medium", "high", "auto")
SERVER_DETECTED = (pb.TURN_DETECTION_MODE_SERVER_VAD, pb.TURN_DETECTION_MODE_SEMANTIC_VAD)
# The client's default instructions. Stage0 puts its own voice-agent
# preamble before whatever instructions a session has (stage0/backends/cascade/llm/prompt.py).
DEFAULT_INSTRUCTIONS = "You are a helpful voice assistant. Keep your answers short."
# The one voice that speaks (Piper's joe). OpenAI's voice names are accepted so
# that stock clients work, and `session.updated` says which voice really speaks.
SPEAKING_VOICE = "joe"
OPENAI_VOICES = (
    "alloy",
    "ash",
    "ballad",
    "coral",
    "echo",
    "sage",
    "shimmer",
    "verse",
    "marin",
    "cedar",
)
SPEED_RANGE = (0.25, 1.5)
TRUNCATION_TYPES = ("auto", "retention_ratio", "disabled")
# "auto": cut history down to this share of the context at once, so the kept
# prefix stays the same (and cached) for the next several turns.
AUTO_RETENTION = 0.8


class ConfigError(ValueError):
    """An invalid session configuration; `param` names the offending field."""

    def __init__(self, code: str, message: str, param: str) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


def default_server_vad() -> pb.TurnDetection:
    return pb.TurnDetection(
        mode=pb.TURN_DETECTION_MODE_SERVER_VAD,
        threshold=0.5,
        prefix_padding_ms=300,
        silence_duration_ms=500,
        create_response=True,
        interrupt_response=True,
    )


def defaults(model: str = DEFAULT_MODEL) -> pb.SessionConfig:
    return pb.SessionConfig(
        model=model,
        instructions=DEFAULT_INSTRUCTIONS,
        voice=SPEAKING_VOICE,
        speed=1.0,
        truncation=pb.Truncation(type="auto"),
        output_modalities=["audio"],
        input_audio_format=pb.AudioFormat(encoding=PCM16, sample_rate_hz=DEFAULT_PCM_RATE),
        output_audio_format=pb.AudioFormat(encoding=PCM16, sample_rate_hz=PCM_OUTPUT_RATE),
        # OpenAI's default: absent turn_detection means server VAD.
        turn_detection=default_server_vad(),
        temperature=0.0,
        max_output_tokens=0,
        native_duplex=False,
        auto_response=True,
        overlap_policy="listen_only",
        playback_commit_policy="commit_all_on_done",
        tool_choice=tools.AUTO,
    )


def merge(
    current: pb.SessionConfig, patch: pb.SessionConfigPatch, *, max_output_tokens: int
) -> pb.SessionConfig:
    """The validated result of applying `patch`; raises ConfigError and changes nothing."""
    out = pb.SessionConfig()
    out.CopyFrom(current)
    for name in (
        "model",
        "instructions",
        "temperature",
        "speed",
        "native_duplex",
        "auto_response",
        "overlap_policy",
        "playback_commit_policy",
        "return_stage_metrics",
        "resumable",
    ):
        if patch.HasField(name):
            setattr(out, name, getattr(patch, name))
    if patch.HasField("voice"):
        out.voice = _speaking_voice(patch.voice)
    if patch.HasField("truncation"):
        out.truncation.CopyFrom(patch.truncation)
    if patch.has_tools:
        del out.tools[:]
        out.tools.extend(patch.tools)
    if patch.HasField("tool_choice"):
        out.tool_choice.CopyFrom(patch.tool_choice)
    if patch.has_output_modalities:
        del out.output_modalities[:]
        out.output_modalities.extend(patch.output_modalities)
    if patch.HasField("input_audio_format"):
        _merge_format(out.input_audio_format, patch.input_audio_format, PCM_INPUT_RATES)
    if patch.HasField("output_audio_format"):
        _merge_format(out.output_audio_format, patch.output_audio_format, (PCM_OUTPUT_RATE,))
    if patch.has_turn_detection:
        out.turn_detection.CopyFrom(patch.turn_detection)
        if out.turn_detection.mode == pb.TURN_DETECTION_MODE_SERVER_VAD:
            _fill_vad_defaults(out.turn_detection)
        elif out.turn_detection.mode == pb.TURN_DETECTION_MODE_SEMANTIC_VAD:
            _fill_semantic_defaults(out.turn_detection)
    if patch.HasField("max_output_tokens"):
        if patch.max_output_tokens < 0:
            raise ConfigError(
                "invalid_value", "max_output_tokens must be positive or 'inf'", "max_output_tokens"
            )
        # Clients can lower the server's ceiling, never raise it; 0 ("inf")
        # means the ceiling itself.
        out.max_output_tokens = min(patch.max_output_tokens, max_output_tokens)
    validate(out)
    return out


def validate(cfg: pb.SessionConfig) -> None:
    fin, fout = cfg.input_audio_format, cfg.output_audio_format
    if fin.encoding not in INPUT_ENCODINGS:
        raise ConfigError(
            "unsupported_audio_format",
            f"input audio format {fin.encoding!r} is not supported; use one of {INPUT_ENCODINGS}",
            "input_audio_format",
        )
    if fin.sample_rate_hz not in allowed_rates(fin.encoding, PCM_INPUT_RATES):
        raise ConfigError(
            "unsupported_audio_format",
            f"input sample rate {fin.sample_rate_hz} Hz is not supported for {fin.encoding}; "
            f"use one of {allowed_rates(fin.encoding, PCM_INPUT_RATES)}",
            "audio.input.format.rate",
        )
    if fout.encoding not in OUTPUT_ENCODINGS or fout.sample_rate_hz not in allowed_rates(
        fout.encoding, (PCM_OUTPUT_RATE,)
    ):
        raise ConfigError(
            "unsupported_audio_format",
            f"output audio must be pcm16 at {PCM_OUTPUT_RATE} Hz or G.711 "
            f"({' or '.join(G711)}) at {G711_RATE} Hz",
            "audio.output.format",
        )
    if not cfg.output_modalities or any(m not in MODALITIES for m in cfg.output_modalities):
        raise ConfigError(
            "invalid_value",
            f"output_modalities must be a non-empty subset of {MODALITIES}",
            "output_modalities",
        )
    if not 0.0 <= cfg.temperature <= 2.0:
        raise ConfigError("invalid_value", "temperature must be within [0, 2]", "temperature")
    low, high = SPEED_RANGE
    # 0: a config stored before speed existed, read as normal speed.
    if cfg.speed and not low <= cfg.speed <= high:
        raise ConfigError(
            "invalid_value", f"speed must be within [{low}, {high}]", "audio.output.speed"
        )
    _validate_truncation(cfg.truncation)
    wrong = tools.problem(cfg.tools, cfg.tool_choice)
    if wrong is not None:
        raise ConfigError("invalid_value", *wrong)
    if cfg.overlap_policy not in OVERLAP_POLICIES:
        raise ConfigError(
            "invalid_value", f"overlap_policy must be one of {OVERLAP_POLICIES}", "overlap_policy"
        )
    if cfg.playback_commit_policy not in PLAYBACK_POLICIES:
        raise ConfigError(
            "invalid_value",
            f"playback_commit_policy must be one of {PLAYBACK_POLICIES}",
            "playback_commit_policy",
        )
    td = cfg.turn_detection
    if td.mode == pb.TURN_DETECTION_MODE_SERVER_VAD:
        if not 0.0 < td.threshold < 1.0:
            raise ConfigError(
                "invalid_value",
                "turn_detection.threshold must be within (0, 1)",
                "turn_detection.threshold",
            )
        if td.silence_duration_ms < 0 or td.prefix_padding_ms < 0:
            raise ConfigError(
                "invalid_value", "turn_detection durations must not be negative", "turn_detection"
            )
    elif td.mode == pb.TURN_DETECTION_MODE_SEMANTIC_VAD and td.eagerness not in EAGERNESS:
        raise ConfigError(
            "invalid_value",
            f"turn_detection.eagerness must be one of {EAGERNESS}, got {td.eagerness!r}",
            "turn_detection.eagerness",
        )


def retention_ratio(cfg: pb.SessionConfig) -> float:
    """The share of the context history is cut down to (0: never cut)."""
    t = cfg.truncation
    if t.type == "disabled":
        return 0.0
    return t.retention_ratio if t.type == "retention_ratio" else AUTO_RETENTION


def _speaking_voice(asked: str) -> str:
    if asked != SPEAKING_VOICE and asked not in OPENAI_VOICES:
        raise ConfigError(
            "invalid_value",
            f"voice {asked!r} is not supported; use {SPEAKING_VOICE!r} or one of {OPENAI_VOICES}",
            "audio.output.voice",
        )
    return SPEAKING_VOICE


def _validate_truncation(t: pb.Truncation) -> None:
    # "": a config stored before truncation existed, read as "auto".
    if t.type and t.type not in TRUNCATION_TYPES:
        raise ConfigError(
            "invalid_value", f"truncation must be one of {TRUNCATION_TYPES}", "truncation"
        )
    if t.type == "retention_ratio" and not 0.0 < t.retention_ratio <= 1.0:
        raise ConfigError(
            "invalid_value",
            "truncation.retention_ratio must be within (0, 1]",
            "truncation.retention_ratio",
        )


def lane(cfg: pb.SessionConfig) -> stage_pb2.Lane:
    if cfg.native_duplex:
        return stage_pb2.LANE_NATIVE
    if cfg.turn_detection.mode in SERVER_DETECTED:
        # semantic_vad is a server_vad turn for the session; stage0 ends it differently.
        return stage_pb2.LANE_SERVER_VAD
    return stage_pb2.LANE_MANUAL


def _merge_format(into: pb.AudioFormat, patch: pb.AudioFormat, pcm_rates: tuple[int, ...]) -> None:
    if patch.encoding:
        into.encoding = patch.encoding
    if patch.sample_rate_hz:
        into.sample_rate_hz = patch.sample_rate_hz
    elif into.sample_rate_hz not in allowed_rates(into.encoding, pcm_rates):
        # A new encoding without a rate takes its own default: `g711_ulaw`
        # means 8 kHz, and leaving G.711 for PCM returns to 24 kHz.
        into.sample_rate_hz = G711_RATE if into.encoding in G711 else DEFAULT_PCM_RATE


def _fill_vad_defaults(td: pb.TurnDetection) -> None:
    d = default_server_vad()
    for name in (
        "threshold",
        "prefix_padding_ms",
        "silence_duration_ms",
        "create_response",
        "interrupt_response",
    ):
        if not td.HasField(name):
            setattr(td, name, getattr(d, name))


def _fill_semantic_defaults(td: pb.TurnDetection) -> None:
    if not td.HasField("eagerness"):
        td.eagerness = "auto"
    for name in ("create_response", "interrupt_response"):
        if not td.HasField(name):
            setattr(td, name, True)
