"""A `session.update`'s `session` object (and the URL query) -> SessionConfigPatch.

Both generations of OpenAI's spellings are read: the beta top-level keys
(`input_audio_format: "pcm16"`, `turn_detection`, `voice`, `modalities`)
and the GA nested ones (`audio.input.format` objects, `output_modalities`),
the nested winning where a client sends both. The patch holds only what the
client set; the session merges it onto the effective configuration and
judges what needs the whole (rates of the output voice, `eagerness`).
"""

from __future__ import annotations

from typing import Any

from antiphon.common.audio_formats import INPUT_ENCODINGS, OUTPUT_ENCODINGS
from antiphon.common.ids import valid_session_id
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate import fields, tools
from antiphon.gateway.translate.audio_formats import session_format
from antiphon.v1 import common_pb2 as cpb

# Plain string fields copied as they are (the session validates their values).
_STRINGS = ("model", "instructions", "session_id", "overlap_policy", "playback_commit_policy")


def query_flag(value: str) -> bool:
    """A URL query switch (`?duplex=1`, `?resumable=true`)."""
    return value.lower() in ("1", "true", "yes")


def session_patch(event: fields.Event, input_encoding: str) -> cpb.SessionConfigPatch:
    """The patch of a `session.update`; `input_encoding` is the one the client
    last declared, which a new input rate alone is checked against."""
    s = event.get("session") or {}
    if not isinstance(s, dict):
        raise ClientError("invalid_value", "`session` must be an object", param="session")
    stype = s.get("type")
    if stype is not None and stype != "realtime":
        raise ClientError(
            "unsupported_session_type",
            f"session.type {stype!r} is not supported; use 'realtime'",
            param="session.type",
        )
    p = cpb.SessionConfigPatch()
    for key in _STRINGS:
        if s.get(key) is not None:
            setattr(p, key, fields.string(s[key], f"session.{key}"))
    audio = fields.obj(s.get("audio"), "session.audio")
    audio_in = fields.obj(audio.get("input"), "session.audio.input")
    audio_out = fields.obj(audio.get("output"), "session.audio.output")
    voice = audio_out.get("voice", s.get("voice"))
    if voice is not None:
        p.voice = fields.string(voice, "session.voice")
    modalities = s.get("output_modalities", s.get("modalities"))
    if modalities is not None:
        p.output_modalities.extend(fields.string_list(modalities, "session.output_modalities"))
        p.has_output_modalities = True
    rate_key = "session.audio.input.sample_rate_hz"
    if "sample_rate_hz" not in audio_in:
        rate_key = "session.sample_rate_hz"
    in_fmt = session_format(
        audio_in.get("format", s.get("input_audio_format")),
        audio_in.get("sample_rate_hz", s.get("sample_rate_hz")),
        "session.audio.input.format",
        rate_key,
        INPUT_ENCODINGS,
        input_encoding,
    )
    if in_fmt is not None:
        p.input_audio_format.CopyFrom(in_fmt)
    out_fmt = session_format(
        audio_out.get("format", s.get("output_audio_format")),
        None,
        "session.audio.output.format",
        "",
        OUTPUT_ENCODINGS,
        None,
    )
    if out_fmt is not None:
        p.output_audio_format.CopyFrom(out_fmt)
    for where, holder in (("session.audio.input", audio_in), ("session", s)):
        if "turn_detection" in holder:
            p.turn_detection.CopyFrom(
                _turn_detection(holder["turn_detection"], f"{where}.turn_detection")
            )
            p.has_turn_detection = True
            break
    if s.get("resumable") is not None:
        p.resumable = fields.boolean(s["resumable"], "session.resumable")
    if s.get("temperature") is not None:
        p.temperature = fields.number(s["temperature"], "session.temperature")
    speed = audio_out.get("speed", s.get("speed"))
    if speed is not None:
        p.speed = fields.number(speed, "session.audio.output.speed")
    if s.get("truncation") is not None:
        p.truncation.CopyFrom(_truncation(s["truncation"], "session.truncation"))
    tokens = s.get("max_output_tokens", s.get("max_response_output_tokens"))
    if tokens is not None:
        p.max_output_tokens = fields.max_tokens(tokens, "session.max_output_tokens")
    tools.read_into(s, p, "session")
    extra = fields.obj(s.get("extra_body"), "session.extra_body")
    native = extra.get("native_duplex", extra.get("minicpmo45_native_duplex"))
    if native is not None:
        p.native_duplex = fields.boolean(native, "session.extra_body.native_duplex")
    for key in ("auto_response", "return_stage_metrics"):
        if extra.get(key) is not None:
            setattr(p, key, fields.boolean(extra[key], f"session.extra_body.{key}"))
    return p


def with_query(patch: cpb.SessionConfigPatch, query: dict[str, str]) -> cpb.SessionConfigPatch:
    """The opening patch with the URL query's defaults under it (the event's fields win)."""
    if not patch.HasField("model") and query.get("model"):
        patch.model = query["model"]
    if not patch.HasField("session_id") and query.get("session_id"):
        patch.session_id = query["session_id"]
    if patch.HasField("session_id") and not valid_session_id(patch.session_id):
        raise ClientError(
            "invalid_value",
            "session_id must be 1-128 characters of A-Z a-z 0-9 _ . : -",
            param="session.session_id",
        )
    native = query.get("native_duplex") or query.get("minicpmo45_native_duplex")
    if not patch.HasField("native_duplex") and native:
        patch.native_duplex = query_flag(native)
    # For clients that configure by URL only; `session.resumable` wins.
    resumable = query.get("resumable")
    if not patch.HasField("resumable") and resumable:
        patch.resumable = query_flag(resumable)
    return patch


def _truncation(value: Any, param: str) -> cpb.Truncation:
    """OpenAI's `truncation`: "auto", "disabled", or a retention ratio object.
    The session judges the values."""
    if isinstance(value, str):
        return cpb.Truncation(type=value)
    t = fields.obj(value, param)
    out = cpb.Truncation(type=fields.string(t.get("type", ""), f"{param}.type"))
    if t.get("retention_ratio") is not None:
        out.retention_ratio = fields.number(t["retention_ratio"], f"{param}.retention_ratio")
    return out


def _turn_detection(value: Any, param: str) -> cpb.TurnDetection:
    if value is None:
        return cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_NONE)
    td = fields.obj(value, param)
    kind = td.get("type", "server_vad")
    if kind == "semantic_vad":
        out = cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_SEMANTIC_VAD)
        if td.get("eagerness") is not None:
            # Its values are the session's to judge (session_config.EAGERNESS).
            out.eagerness = fields.string(td["eagerness"], f"{param}.eagerness")
    elif kind == "server_vad":
        out = cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_SERVER_VAD)
        if td.get("threshold") is not None:
            out.threshold = fields.number(td["threshold"], f"{param}.threshold")
        for key in ("prefix_padding_ms", "silence_duration_ms"):
            if td.get(key) is not None:
                setattr(
                    out, key, fields.non_negative_int(td[key], f"{param}.{key}", fields.INT32_MAX)
                )
    else:
        raise ClientError(
            "unsupported_turn_detection",
            f"turn_detection.type {kind!r} is unsupported; "
            "use 'server_vad', 'semantic_vad' or null",
            param=param,
        )
    out.create_response = fields.boolean(
        td.get("create_response", True), f"{param}.create_response"
    )
    out.interrupt_response = fields.boolean(
        td.get("interrupt_response", True), f"{param}.interrupt_response"
    )
    return out
