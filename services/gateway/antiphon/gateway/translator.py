"""Client JSON -> typed `ClientCommand`: alias normalisation and input validation.

The translator accepts both generations of OpenAI's Realtime spellings (the
beta `input_audio_format: "pcm16"` and the GA `audio.input.format` object)
and the reference's duplex extensions. Base64 audio is decoded here, once;
past this module audio is raw bytes. It keeps no session state: the session
service owns the effective configuration (and resamples input to it).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from antiphon.common.ids import valid_session_id
from antiphon.gateway.errors import ClientError
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

INPUT_RATES = (16000, 24000)

# Alias -> canonical type (reference: "Normative Realtime event contract").
ALIASES = {
    "input.audio.append": "input_audio_buffer.append",
    "push_chunk": "input_audio_buffer.append",
    "input.commit": "input_audio_buffer.commit",
    "close_session": "session.close",
    "close": "session.close",
    "session_close": "session.close",
}

# Reference events the next releases implement; refused with a typed error.
NOT_YET = {
    "input.cancel",
    "input.text.append",
    "input_text.append",
    "push_text",
    "conversation.item.create",
    "conversation.item.retrieve",
    "conversation.item.delete",
    "conversation.item.truncate",
    "output_audio_buffer.clear",
    "barge_in",
    "turn.signal",
    "signal_turn",
    "playback.ack",
    "audio.playback_ack",
}

# Canonical client event type -> the Translator method that builds its command.
HANDLERS = {
    "session.update": "_update",
    "input_audio_buffer.append": "_append",
    "input_audio_buffer.commit": "_commit",
    "input_audio_buffer.clear": "_clear",
    "response.create": "_response_create",
    "response.cancel": "_response_cancel",
    "session.close": "_close",
    "session.heartbeat": "_heartbeat",
    "session.event_ack": "_event_ack",
}

_BETA_AUDIO_FORMATS = {"pcm16": "pcm16"}
_GA_AUDIO_TYPES = {"audio/pcm": "pcm16"}


def canonical_type(event: dict[str, Any]) -> str:
    t = event.get("type")
    if not isinstance(t, str) or not t:
        raise ClientError("invalid_event", "every event needs a string `type`", param="type")
    return ALIASES.get(t, t)


def metric_label(event: dict[str, Any]) -> str:
    """The event's type as a metric label; client-made names collapse to one,
    so a client cannot grow the metric's series without bound."""
    t = event.get("type")
    known = t in ALIASES or t in NOT_YET or t in HANDLERS
    return t if isinstance(t, str) and known else "unknown"


class Translator:
    """Translates one connection's client events."""

    def translate(self, event: dict[str, Any]) -> spb.ClientCommand:
        """The typed command for one client event; raises ClientError."""
        etype = canonical_type(event)
        method = HANDLERS.get(etype)
        if etype == "session.resume":
            raise ClientError(
                "session_already_open",
                "session.resume is only valid as the first event of a new connection",
                param="type",
            )
        if method is None:
            if etype in NOT_YET:
                raise ClientError(
                    "unsupported_event",
                    f"{etype} is not supported by this server yet",
                    param="type",
                )
            raise ClientError("invalid_event", f"unknown event type {etype!r}", param="type")
        cmd: spb.ClientCommand = getattr(self, method)(event)
        cmd.client_type = etype
        event_id = event.get("event_id")
        if isinstance(event_id, str):
            cmd.event_id = event_id
        op = event.get("operation_id")
        if isinstance(op, str):
            cmd.operation_id = op
        return cmd

    def open(self, event: dict[str, Any], query: dict[str, str]) -> spb.ClientCommand:
        """The handshake: `session.update` opens (with URL query defaults),
        `session.resume` re-attaches; `?autostart=0` allows only the latter."""
        etype = canonical_type(event)
        if etype == "session.resume":
            return self._resume(event)
        if etype != "session.update" or query.get("autostart") == "0":
            expected = "session.resume" if query.get("autostart") == "0" else "session.update"
            raise ClientError(
                "session_not_open",
                f"the first event must be {expected} (the open handshake)",
                param="type",
            )
        patch = self._session_patch(event)
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
            patch.native_duplex = native.lower() in ("1", "true", "yes")
        cmd = spb.ClientCommand(client_type="session.update", open=spb.OpenSession(config=patch))
        if isinstance(event.get("event_id"), str):
            cmd.event_id = event["event_id"]
        return cmd

    def _resume(self, event: dict[str, Any]) -> spb.ClientCommand:
        session_id = _str(event.get("session_id"), "session_id")
        if not valid_session_id(session_id):
            raise ClientError(
                "invalid_value", "`session_id` is not a session id", param="session_id"
            )
        resume = spb.ResumeSession(
            session_id=session_id,
            incarnation=_non_negative_int(event.get("incarnation", 0), "incarnation"),
            resume_token=_str(event.get("resume_token"), "resume_token"),
            last_received_seq=_non_negative_int(
                event.get("last_received_server_event_seq", 0), "last_received_server_event_seq"
            ),
        )
        cmd = spb.ClientCommand(client_type="session.resume", resume=resume)
        if isinstance(event.get("event_id"), str):
            cmd.event_id = event["event_id"]
        return cmd

    def _clear(self, event: dict[str, Any]) -> spb.ClientCommand:
        return spb.ClientCommand(clear_input=spb.ClearInput())

    def _close(self, event: dict[str, Any]) -> spb.ClientCommand:
        return spb.ClientCommand(close=spb.CloseSession())

    def _heartbeat(self, event: dict[str, Any]) -> spb.ClientCommand:
        return spb.ClientCommand(heartbeat=spb.Heartbeat())

    def _event_ack(self, event: dict[str, Any]) -> spb.ClientCommand:
        seq = _non_negative_int(event.get("server_event_seq"), "server_event_seq")
        return spb.ClientCommand(event_ack=spb.EventAck(seq=seq))

    # ------------------------------------------------------------- input
    def _append(self, event: dict[str, Any]) -> spb.ClientCommand:
        audio = event.get("audio", event.get("chunk"))
        if not isinstance(audio, str):
            raise ClientError("invalid_value", "`audio` must be a base64 string", param="audio")
        try:
            pcm = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ClientError(
                "invalid_audio", "`audio` is not valid base64", param="audio"
            ) from exc
        if len(pcm) % 2:
            raise ClientError(
                "invalid_audio", "pcm16 audio must have an even number of bytes", param="audio"
            )
        append = spb.AppendAudio(pcm16=pcm)
        rate = event.get("sample_rate_hz")
        if rate is not None:
            append.sample_rate_hz = _input_rate(rate, "sample_rate_hz")
        is_speech = event.get("is_speech")
        if is_speech is not None:
            append.is_speech = _bool(is_speech, "is_speech")
        return spb.ClientCommand(append_audio=append)

    def _commit(self, event: dict[str, Any]) -> spb.ClientCommand:
        commit = spb.CommitInput()
        if event.get("is_speech") is not None:
            commit.is_speech = _bool(event["is_speech"], "is_speech")
        return spb.ClientCommand(commit=commit)

    # --------------------------------------------------------- responses
    def _response_create(self, event: dict[str, Any]) -> spb.ClientCommand:
        body = event.get("response") or {}
        if not isinstance(body, dict):
            raise ClientError("invalid_value", "`response` must be an object", param="response")
        req = spb.CreateResponse()
        if "instructions" in body:
            req.instructions = _str(body["instructions"], "response.instructions")
        modalities = body.get("output_modalities", body.get("modalities"))
        if modalities is not None:
            req.output_modalities.extend(_modalities(modalities, "response.output_modalities"))
        if body.get("temperature") is not None:
            req.temperature = _number(body["temperature"], "response.temperature")
        tokens = body.get("max_output_tokens", body.get("max_response_output_tokens"))
        if tokens is not None:
            req.max_output_tokens = _max_tokens(tokens, "response.max_output_tokens")
        metadata = body.get("metadata")
        if metadata is not None:
            if not isinstance(metadata, dict):
                raise ClientError(
                    "invalid_value", "`metadata` must be an object", param="response.metadata"
                )
            req.metadata.update({str(k): str(v) for k, v in metadata.items()})
        return spb.ClientCommand(create_response=req)

    def _response_cancel(self, event: dict[str, Any]) -> spb.ClientCommand:
        rid = event.get("response_id") or ""
        return spb.ClientCommand(
            cancel_response=spb.CancelResponse(response_id=_str(rid, "response_id"))
        )

    # ----------------------------------------------------------- session
    def _update(self, event: dict[str, Any]) -> spb.ClientCommand:
        return spb.ClientCommand(update=spb.UpdateSession(config=self._session_patch(event)))

    def _session_patch(self, event: dict[str, Any]) -> cpb.SessionConfigPatch:
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
        for key in (
            "model",
            "instructions",
            "session_id",
            "overlap_policy",
            "playback_commit_policy",
        ):
            if s.get(key) is not None:
                setattr(p, key, _str(s[key], f"session.{key}"))
        audio = _obj(s.get("audio"), "session.audio")
        audio_in = _obj(audio.get("input"), "session.audio.input")
        audio_out = _obj(audio.get("output"), "session.audio.output")
        voice = audio_out.get("voice", s.get("voice"))
        if voice is not None:
            p.voice = _str(voice, "session.voice")
        modalities = s.get("output_modalities", s.get("modalities"))
        if modalities is not None:
            p.output_modalities.extend(_modalities(modalities, "session.output_modalities"))
            p.has_output_modalities = True
        in_fmt = _audio_format(
            audio_in.get("format", s.get("input_audio_format")),
            audio_in.get("sample_rate_hz", s.get("sample_rate_hz")),
            "session.audio.input.format",
        )
        if in_fmt is not None:
            if in_fmt.sample_rate_hz:
                _input_rate(in_fmt.sample_rate_hz, "session.audio.input.format.rate")
            p.input_audio_format.CopyFrom(in_fmt)
        out_fmt = _audio_format(
            audio_out.get("format", s.get("output_audio_format")),
            None,
            "session.audio.output.format",
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
        if s.get("temperature") is not None:
            p.temperature = _number(s["temperature"], "session.temperature")
        tokens = s.get("max_output_tokens", s.get("max_response_output_tokens"))
        if tokens is not None:
            p.max_output_tokens = _max_tokens(tokens, "session.max_output_tokens")
        extra = _obj(s.get("extra_body"), "session.extra_body")
        native = extra.get("native_duplex", extra.get("minicpmo45_native_duplex"))
        if native is not None:
            p.native_duplex = _bool(native, "session.extra_body.native_duplex")
        for key in ("auto_response", "return_stage_metrics"):
            if extra.get(key) is not None:
                setattr(p, key, _bool(extra[key], f"session.extra_body.{key}"))
        return p


# ---------------------------------------------------------------- parsing
def _obj(value: Any, param: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ClientError("invalid_value", f"`{param}` must be an object", param=param)
    return value


def _str(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise ClientError("invalid_value", f"`{param}` must be a string", param=param)
    return value


def _bool(value: Any, param: str) -> bool:
    if not isinstance(value, bool):
        raise ClientError("invalid_value", f"`{param}` must be a boolean", param=param)
    return value


def _number(value: Any, param: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ClientError("invalid_value", f"`{param}` must be a number", param=param)
    return float(value)


def _positive_int(value: Any, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ClientError(
            "invalid_value", f"`{param}` must be a positive integer or 'inf'", param=param
        )
    return value


def _non_negative_int(value: Any, param: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ClientError("invalid_value", f"`{param}` must be a non-negative integer", param=param)
    return value


def _max_tokens(value: Any, param: str) -> int:
    """A positive limit, or 0 for "inf" (the server's ceiling)."""
    return 0 if value == "inf" else _positive_int(value, param)


def _input_rate(value: Any, param: str) -> int:
    rate = _positive_int(value, param)
    if rate not in INPUT_RATES:
        raise ClientError(
            "unsupported_audio_format",
            f"input sample rate {rate} Hz is not supported; use one of {INPUT_RATES}",
            param=param,
        )
    return rate


def _modalities(value: Any, param: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise ClientError("invalid_value", f"`{param}` must be a list of strings", param=param)
    return list(value)


def _audio_format(value: Any, rate: Any, param: str) -> cpb.AudioFormat | None:
    """Beta string (`"pcm16"`) or GA object (`{"type": "audio/pcm", "rate": 24000}`)."""
    if value is None and rate is None:
        return None
    fmt = cpb.AudioFormat()
    if isinstance(value, str):
        if value not in _BETA_AUDIO_FORMATS:
            raise ClientError(
                "unsupported_audio_format", f"audio format {value!r} is not supported", param=param
            )
        fmt.encoding = _BETA_AUDIO_FORMATS[value]
    elif isinstance(value, dict):
        ftype = value.get("type", "audio/pcm")
        if ftype not in _GA_AUDIO_TYPES:
            raise ClientError(
                "unsupported_audio_format", f"audio format {ftype!r} is not supported", param=param
            )
        fmt.encoding = _GA_AUDIO_TYPES[ftype]
        if value.get("rate") is not None:
            fmt.sample_rate_hz = _positive_int(value["rate"], f"{param}.rate")
    elif value is not None:
        raise ClientError("invalid_value", f"`{param}` must be a string or object", param=param)
    if rate is not None:
        fmt.sample_rate_hz = _positive_int(rate, "sample_rate_hz")
    return fmt


def _turn_detection(value: Any, param: str) -> cpb.TurnDetection:
    if value is None:
        return cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_NONE)
    td = _obj(value, param)
    kind = td.get("type", "server_vad")
    if kind != "server_vad":
        raise ClientError(
            "unsupported_turn_detection",
            f"turn_detection.type {kind!r} is unsupported; use 'server_vad' or null",
            param=param,
        )
    out = cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_SERVER_VAD)
    if td.get("threshold") is not None:
        out.threshold = _number(td["threshold"], f"{param}.threshold")
    for key in ("prefix_padding_ms", "silence_duration_ms"):
        if td.get(key) is not None:
            v = td[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ClientError(
                    "invalid_value",
                    f"`{param}.{key}` must be a non-negative integer",
                    param=f"{param}.{key}",
                )
            setattr(out, key, v)
    out.create_response = _bool(td.get("create_response", True), f"{param}.create_response")
    out.interrupt_response = _bool(
        td.get("interrupt_response", True), f"{param}.interrupt_response"
    )
    return out
