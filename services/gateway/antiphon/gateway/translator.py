"""Client JSON -> typed `ClientCommand`: alias normalisation and input validation.

The translator accepts both generations of OpenAI's Realtime spellings (the
beta `input_audio_format: "pcm16"` and the GA `audio.input.format` object)
and the reference's duplex extensions. Base64 audio is decoded here, once,
and every accepted encoding becomes PCM16 (`audio_formats`); past this
module audio is raw PCM16 bytes. An invalid event raises one ClientError
and yields no command, so a refused event changes nothing.

A dialect may take fewer client types than the translator knows (OpenAI's
dialect takes OpenAI's own, `client_types`): another type is refused as
OpenAI refuses an unknown one.

The only thing it remembers is the input encoding the client last declared,
because appends that name no `format` are in it; the session service owns
the effective configuration (and resamples input to it). A socket that
resumed a session starts from the session's own input encoding (`adopt`).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from antiphon.common.ids import valid_session_id
from antiphon.gateway import audio_formats as af
from antiphon.gateway.errors import ClientError
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Alias -> canonical type (reference: "Normative Realtime event contract").
ALIASES = {
    "input.audio.append": "input_audio_buffer.append",
    "push_chunk": "input_audio_buffer.append",
    "input.commit": "input_audio_buffer.commit",
    "input_text.append": "input.text.append",
    "push_text": "input.text.append",
    "signal_turn": "turn.signal",
    "audio.playback_ack": "playback.ack",
    "close_session": "session.close",
    "close": "session.close",
    "session_close": "session.close",
}

# The legacy append aliases carry WAV unless the event names a `format`.
LEGACY_APPEND_TYPES = ("push_chunk", "input.audio.append")

# Canonical client event type -> the Translator method that builds its command.
HANDLERS = {
    "session.update": "_update",
    "input_audio_buffer.append": "_append",
    "input_audio_buffer.commit": "_commit",
    "input_audio_buffer.clear": "_clear",
    "input.cancel": "_cancel_input",
    "input.text.append": "_append_text",
    "conversation.item.create": "_create_item",
    "conversation.item.retrieve": "_retrieve_item",
    "conversation.item.delete": "_delete_item",
    "conversation.item.truncate": "_truncate_item",
    "response.create": "_response_create",
    "response.cancel": "_response_cancel",
    "output_audio_buffer.clear": "_clear_output_audio",
    "barge_in": "_barge_in",
    "turn.signal": "_turn_signal",
    "playback.ack": "_playback_ack",
    "session.close": "_close",
    "session.heartbeat": "_heartbeat",
    "session.event_ack": "_event_ack",
}

# The turn signals `turn.signal` carries; the reference defines only barge-in.
TURN_SIGNALS = ("barge_in",)
ROLES = ("user", "assistant", "system")
TEXT_PARTS = ("input_text", "text", "output_text")
# `conversation.item.create` item types (OpenAI's: messages, tool calls and their results).
ITEM_TYPES = ("message", "function_call", "function_call_output")
# `previous_item_id` that inserts at the start of the conversation (OpenAI's spelling).
ROOT_ITEM = "root"
# `barge_in.source` when the client names none.
CLIENT_SIGNAL_SOURCE = "client_event"


def canonical_type(event: dict[str, Any]) -> str:
    t = event.get("type")
    if not isinstance(t, str) or not t:
        raise ClientError("invalid_event", "every event needs a string `type`", param="type")
    return ALIASES.get(t, t)


def metric_label(event: dict[str, Any]) -> str:
    """The event's type as a metric label; client-made names collapse to one,
    so a client cannot grow the metric's series without bound."""
    t = event.get("type")
    known = t in ALIASES or t in HANDLERS or t == "session.resume"
    return t if isinstance(t, str) and known else "unknown"


class Translator:
    """Translates one connection's client events.

    `client_types`: the client event types (as sent, aliases included) this
    connection's dialect takes; None takes every type the translator knows.
    """

    def __init__(self, client_types: frozenset[str] | None = None) -> None:
        # The client's declaration, not the session's echo: an append sent
        # right after a session.update is already in the new encoding, before
        # the echo can come back.
        self._input_encoding = af.PCM16
        self._declared = False
        self._client_types = client_types

    def translate(self, event: dict[str, Any]) -> spb.ClientCommand:
        """The typed command for one client event; raises ClientError."""
        if self._client_types is not None:
            _only(event, self._client_types)
        etype = canonical_type(event)
        method = HANDLERS.get(etype)
        if etype == "session.resume":
            raise ClientError(
                "session_already_open",
                "session.resume is only valid as the first event of a new connection",
                param="type",
            )
        if method is None:
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
        patch = _with_query(self._session_patch(event), query)
        self._declare(patch)
        cmd = spb.ClientCommand(client_type="session.update", open=spb.OpenSession(config=patch))
        if isinstance(event.get("event_id"), str):
            cmd.event_id = event["event_id"]
        return cmd

    def connect(self, query: dict[str, str]) -> spb.ClientCommand:
        """The open of a dialect that opens on connect (OpenAI's): the server's
        defaults and what the URL query sets, before any client event."""
        patch = _with_query(cpb.SessionConfigPatch(), query)
        return spb.ClientCommand(
            client_type="websocket.connect",
            open=spb.OpenSession(config=patch, on_connect=True),
        )

    def _declare(self, patch: cpb.SessionConfigPatch) -> None:
        """Remember a valid patch's input encoding (only once nothing can refuse it)."""
        if patch.input_audio_format.encoding:
            self._input_encoding = patch.input_audio_format.encoding
            self._declared = True

    def adopt(self, config: cpb.SessionConfig) -> None:
        """A resumed session's input encoding (`session.resumed`), unless the
        client already declared one on this socket: its own word is newer."""
        if not self._declared:
            self._input_encoding = config.input_audio_format.encoding or af.PCM16

    def _resume(self, event: dict[str, Any]) -> spb.ClientCommand:
        session_id = _str(_required(event, "session_id"), "session_id")
        if not valid_session_id(session_id):
            raise ClientError(
                "invalid_value", "`session_id` is not a session id", param="session_id"
            )
        resume = spb.ResumeSession(
            session_id=session_id,
            incarnation=_non_negative_int(event.get("incarnation", 0), "incarnation"),
            resume_token=_str(_required(event, "resume_token"), "resume_token"),
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
        seq = _non_negative_int(_required(event, "server_event_seq"), "server_event_seq")
        return spb.ClientCommand(event_ack=spb.EventAck(seq=seq))

    # ------------------------------------------------------------- input
    def _append(self, event: dict[str, Any]) -> spb.ClientCommand:
        key = "chunk" if "audio" not in event and "chunk" in event else "audio"
        raw = _base64(_required(event, key, "audio"), "audio")
        default = af.WAV if event.get("type") in LEGACY_APPEND_TYPES else self._input_encoding
        encoding, rate = _event_format(event, default)
        pcm = _decode(raw, encoding, "audio")
        if rate and pcm.sample_rate_hz and rate != pcm.sample_rate_hz:
            raise ClientError(
                "invalid_value",
                f"sample_rate_hz {rate} disagrees with the audio's own {pcm.sample_rate_hz} Hz",
                param="sample_rate_hz",
            )
        append = spb.AppendAudio(pcm16=pcm.pcm16, sample_rate_hz=pcm.sample_rate_hz or rate)
        is_speech = event.get("is_speech")
        if is_speech is not None:
            append.is_speech = _bool(is_speech, "is_speech")
        return spb.ClientCommand(append_audio=append)

    def _commit(self, event: dict[str, Any]) -> spb.ClientCommand:
        commit = spb.CommitInput()
        if event.get("is_speech") is not None:
            commit.is_speech = _bool(event["is_speech"], "is_speech")
        return spb.ClientCommand(commit=commit)

    def _cancel_input(self, event: dict[str, Any]) -> spb.ClientCommand:
        return spb.ClientCommand(cancel_input=spb.CancelInput())

    def _append_text(self, event: dict[str, Any]) -> spb.ClientCommand:
        text = _non_empty_str(_required(event, "text"), "text")
        return spb.ClientCommand(append_text=spb.AppendText(text=text))

    # ------------------------------------------------------ conversation
    def _create_item(self, event: dict[str, Any]) -> spb.ClientCommand:
        body = _obj(_required(event, "item"), "item")
        create = spb.CreateItem(item=self._item(body))
        previous = event.get("previous_item_id")
        # Absent or null appends (OpenAI: "if not set, appended to the end");
        # "root" inserts first, which the proto spells "".
        if previous is not None:
            previous = _non_empty_str(previous, "previous_item_id")
            create.previous_item_id = "" if previous == ROOT_ITEM else previous
        return spb.ClientCommand(create_item=create)

    def _item(self, body: dict[str, Any]) -> cpb.Item:
        kind = _str(_required(body, "type", "item.type"), "item.type")
        out = cpb.Item(type=kind)
        if body.get("id") is not None:
            out.id = _non_empty_str(body["id"], "item.id")
        if kind == "function_call":
            # A call the client's history holds (OpenAI: `name` and `arguments`
            # required, `call_id` optional; the session names one when absent).
            out.name = _non_empty_str(_required(body, "name", "item.name"), "item.name")
            out.arguments = _str(_required(body, "arguments", "item.arguments"), "item.arguments")
            if body.get("call_id") is not None:
                out.call_id = _non_empty_str(body["call_id"], "item.call_id")
            return out
        if kind == "function_call_output":
            out.call_id = _non_empty_str(_required(body, "call_id", "item.call_id"), "item.call_id")
            out.output = _str(_required(body, "output", "item.output"), "item.output")
            return out
        if kind != "message":
            raise ClientError(
                "invalid_value", f"`item.type` must be one of {ITEM_TYPES}", param="item.type"
            )
        out.role = _one_of(_required(body, "role", "item.role"), ROLES, "item.role")
        content = _required(body, "content", "item.content")
        if not isinstance(content, list) or not content:
            raise ClientError(
                "invalid_value", "`item.content` must be a non-empty list", param="item.content"
            )
        out.content.extend(
            self._content_part(part, out.role, f"item.content[{i}]")
            for i, part in enumerate(content)
        )
        return out

    def _content_part(self, value: Any, role: str, param: str) -> cpb.ContentPart:
        part = _obj(value, param)
        kind = _str(_required(part, "type", f"{param}.type"), f"{param}.type")
        if kind in TEXT_PARTS:
            text = _str(_required(part, "text", f"{param}.text"), f"{param}.text")
            return cpb.ContentPart(type=kind, text=text)
        if kind != "input_audio" or role != "user":
            allowed = (*TEXT_PARTS, "input_audio") if role == "user" else TEXT_PARTS
            raise ClientError(
                "invalid_value",
                f"a {role} message's content types are {allowed}",
                param=f"{param}.type",
            )
        audio, transcript = part.get("audio"), part.get("transcript")
        if audio is None and transcript is None:
            raise ClientError(
                "missing_required_parameter",
                f"an input_audio part needs `audio` or `transcript` (`{param}.audio`)",
                param=f"{param}.audio",
            )
        out = cpb.ContentPart(type=kind)
        if transcript is not None:
            out.transcript = _str(transcript, f"{param}.transcript")
        if audio is not None:
            # In the session's input format, as OpenAI defines it.
            pcm = _decode(_base64(audio, f"{param}.audio"), self._input_encoding, f"{param}.audio")
            out.audio, out.sample_rate_hz = pcm.pcm16, pcm.sample_rate_hz
        return out

    def _retrieve_item(self, event: dict[str, Any]) -> spb.ClientCommand:
        return spb.ClientCommand(retrieve_item=spb.ItemRef(item_id=_item_id(event)))

    def _delete_item(self, event: dict[str, Any]) -> spb.ClientCommand:
        return spb.ClientCommand(delete_item=spb.ItemRef(item_id=_item_id(event)))

    def _truncate_item(self, event: dict[str, Any]) -> spb.ClientCommand:
        truncate = spb.TruncateItem(
            item_id=_item_id(event),
            content_index=_non_negative_int(
                _required(event, "content_index"), "content_index", INT32_MAX
            ),
            audio_end_ms=_non_negative_int(_required(event, "audio_end_ms"), "audio_end_ms"),
        )
        return spb.ClientCommand(truncate_item=truncate)

    # --------------------------------------------------------- responses
    def _response_create(self, event: dict[str, Any]) -> spb.ClientCommand:
        body = event.get("response") or {}
        if not isinstance(body, dict):
            raise ClientError("invalid_value", "`response` must be an object", param="response")
        req = spb.CreateResponse()
        # null is "not given" (LiveKit's `generate_reply()` sends it): the session's apply.
        if body.get("instructions") is not None:
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

    # ------------------------------------------------- output and overlap
    def _clear_output_audio(self, event: dict[str, Any]) -> spb.ClientCommand:
        return spb.ClientCommand(clear_output_audio=spb.ClearOutputAudio())

    def _barge_in(self, event: dict[str, Any]) -> spb.ClientCommand:
        source = event.get("source")
        return spb.ClientCommand(barge_in=_barge_in(source, "source"))

    def _turn_signal(self, event: dict[str, Any]) -> spb.ClientCommand:
        signal = _str(_required(event, "event"), "event")
        if signal not in TURN_SIGNALS:
            raise ClientError(
                "invalid_value",
                f"turn.signal event {signal!r} is not supported; use one of {TURN_SIGNALS}",
                param="event",
            )
        payload = _obj(event.get("payload"), "payload")
        return spb.ClientCommand(barge_in=_barge_in(payload.get("source"), "payload.source"))

    def _playback_ack(self, event: dict[str, Any]) -> spb.ClientCommand:
        ack = spb.PlaybackAck(
            response_id=_non_empty_str(_required(event, "response_id"), "response_id"),
            played_ms=_non_negative_int(_required(event, "played_ms"), "played_ms"),
        )
        if event.get("item_id") is not None:
            ack.item_id = _non_empty_str(event["item_id"], "item_id")
        if event.get("committed_ms") is not None:
            ack.committed_ms = _non_negative_int(event["committed_ms"], "committed_ms")
            if ack.committed_ms > ack.played_ms:
                raise ClientError(
                    "invalid_value",
                    "`committed_ms` cannot exceed `played_ms`: only played audio can be committed",
                    param="committed_ms",
                )
        if event.get("truncate") is not None:
            ack.truncate = _bool(event["truncate"], "truncate")
        return spb.ClientCommand(playback_ack=ack)

    # ----------------------------------------------------------- session
    def _update(self, event: dict[str, Any]) -> spb.ClientCommand:
        patch = self._session_patch(event)
        self._declare(patch)
        return spb.ClientCommand(update=spb.UpdateSession(config=patch))

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
        rate_key = "session.audio.input.sample_rate_hz"
        if "sample_rate_hz" not in audio_in:
            rate_key = "session.sample_rate_hz"
        in_fmt = _session_format(
            audio_in.get("format", s.get("input_audio_format")),
            audio_in.get("sample_rate_hz", s.get("sample_rate_hz")),
            "session.audio.input.format",
            rate_key,
            af.INPUT_ENCODINGS,
            self._input_encoding,
        )
        if in_fmt is not None:
            p.input_audio_format.CopyFrom(in_fmt)
        out_fmt = _session_format(
            audio_out.get("format", s.get("output_audio_format")),
            None,
            "session.audio.output.format",
            "",
            af.OUTPUT_ENCODINGS,
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
            p.resumable = _bool(s["resumable"], "session.resumable")
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
def query_flag(value: str) -> bool:
    """A URL query switch (`?duplex=1`, `?resumable=true`)."""
    return value.lower() in ("1", "true", "yes")


def _with_query(patch: cpb.SessionConfigPatch, query: dict[str, str]) -> cpb.SessionConfigPatch:
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


def _only(event: dict[str, Any], allowed: frozenset[str]) -> None:
    """Refuse a type outside `allowed` as OpenAI refuses an unknown type."""
    t = event.get("type")
    if isinstance(t, str) and t in allowed:
        return
    supported = ", ".join(f"'{a}'" for a in sorted(allowed))
    raise ClientError(
        "invalid_value",
        f"Invalid value: {t!r}. Supported values are: {supported}.",
        param="type",
    )


def _required(event: dict[str, Any], key: str, param: str | None = None) -> Any:
    """`event[key]`; absent and null are the same missing parameter."""
    value = event.get(key)
    if value is None:
        name = param or key
        raise ClientError(
            "missing_required_parameter", f"missing required parameter `{name}`", param=name
        )
    return value


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


def _non_empty_str(value: Any, param: str) -> str:
    text = _str(value, param)
    if not text:
        raise ClientError("invalid_value", f"`{param}` must not be empty", param=param)
    return text


def _one_of(value: Any, allowed: tuple[str, ...], param: str) -> str:
    text = _str(value, param)
    if text not in allowed:
        raise ClientError("invalid_value", f"`{param}` must be one of {allowed}", param=param)
    return text


def _item_id(event: dict[str, Any]) -> str:
    return _non_empty_str(_required(event, "item_id"), "item_id")


def _bool(value: Any, param: str) -> bool:
    if not isinstance(value, bool):
        raise ClientError("invalid_value", f"`{param}` must be a boolean", param=param)
    return value


def _number(value: Any, param: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ClientError("invalid_value", f"`{param}` must be a number", param=param)
    return float(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(value: Any, param: str) -> int:
    # Bounded: a number past the proto field's range would not be refused, it would crash.
    if not _is_int(value) or not 1 <= value <= INT32_MAX:
        raise ClientError("invalid_value", f"`{param}` must be a positive integer", param=param)
    return int(value)


def _non_negative_int(value: Any, param: str, maximum: int = INT64_MAX) -> int:
    if not _is_int(value) or not 0 <= value <= maximum:
        raise ClientError("invalid_value", f"`{param}` must be a non-negative integer", param=param)
    return int(value)


def _max_tokens(value: Any, param: str) -> int:
    """A positive limit, or 0 for "inf" (the server's ceiling)."""
    if value == "inf":
        return 0
    if not _is_int(value) or not 1 <= value <= INT32_MAX:
        raise ClientError(
            "invalid_value", f"`{param}` must be a positive integer or 'inf'", param=param
        )
    return int(value)


def _modalities(value: Any, param: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise ClientError("invalid_value", f"`{param}` must be a list of strings", param=param)
    return list(value)


def _barge_in(source: Any, param: str) -> spb.BargeIn:
    if source is None:
        return spb.BargeIn(source=CLIENT_SIGNAL_SOURCE)
    return spb.BargeIn(source=_non_empty_str(source, param))


# ------------------------------------------------------------------ audio
def _base64(value: Any, param: str) -> bytes:
    if not isinstance(value, str):
        raise ClientError("invalid_value", f"`{param}` must be a base64 string", param=param)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ClientError("invalid_audio", f"`{param}` is not valid base64", param=param) from exc


def _decode(raw: bytes, encoding: str, param: str) -> af.Pcm:
    try:
        return af.decode(raw, encoding)
    except af.AudioDecodeError as exc:
        raise ClientError(exc.code, str(exc), param=param) from exc


def _encoding(name: Any, param: str, allowed: tuple[str, ...]) -> str:
    encoding = af.NAMES.get(_str(name, param))
    if encoding is None or encoding not in allowed:
        raise ClientError(
            "unsupported_audio_format", f"audio format {name!r} is not supported", param=param
        )
    return encoding


def _format_value(value: Any, param: str, allowed: tuple[str, ...]) -> tuple[str, int]:
    """Beta string (`"g711_ulaw"`) or GA object (`{"type": "audio/pcm", "rate": 24000}`):
    the encoding ("" when the object names no type) and the rate (0 when none)."""
    if isinstance(value, str):
        return _encoding(value, param, allowed), 0
    if not isinstance(value, dict):
        raise ClientError("invalid_value", f"`{param}` must be a string or object", param=param)
    encoding = _encoding(value["type"], param, allowed) if "type" in value else ""
    rate = value.get("rate")
    return encoding, 0 if rate is None else _positive_int(rate, f"{param}.rate")


def _check_rate(encoding: str, rate: int, param: str) -> None:
    """A declared rate must be one the encoding can have."""
    if encoding in af.G711 and rate != af.G711_RATE:
        raise ClientError(
            "unsupported_audio_format",
            f"{encoding} audio is {af.G711_RATE} Hz, not {rate} Hz",
            param=param,
        )
    if encoding in (af.PCM16, af.PCM_F32LE) and rate not in af.PCM_RATES:
        raise ClientError(
            "unsupported_audio_format",
            f"input sample rate {rate} Hz is not supported; use one of {af.PCM_RATES}",
            param=param,
        )


def _event_format(event: dict[str, Any], default: str) -> tuple[str, int]:
    """An append's own `format` (or `input_audio_format`) and `sample_rate_hz`:
    its encoding, and the rate it declares (0: none)."""
    key = "format" if "format" in event else "input_audio_format"
    encoding, rate = default, 0
    if event.get(key) is not None:
        allowed = (*af.INPUT_ENCODINGS, af.WAV)
        encoding, rate = _format_value(event[key], key, allowed)
        encoding = encoding or default
    if event.get("sample_rate_hz") is not None:
        given = _positive_int(event["sample_rate_hz"], "sample_rate_hz")
        if rate and given != rate:
            raise ClientError(
                "invalid_value",
                f"sample_rate_hz {given} disagrees with {key}.rate {rate}",
                param="sample_rate_hz",
            )
        rate, key = given, "sample_rate_hz"
    if rate and encoding != af.WAV:
        _check_rate(encoding, rate, "sample_rate_hz" if key == "sample_rate_hz" else f"{key}.rate")
    return encoding, rate


def _session_format(
    value: Any,
    rate: Any,
    param: str,
    rate_param: str,
    allowed: tuple[str, ...],
    current: str | None,
) -> cpb.AudioFormat | None:
    """A session's input or output format; G.711 carries its 8 kHz explicitly.

    `current` is the encoding a rate alone is checked against (None: leave
    the check to the session, which knows the effective format).
    """
    if value is None and rate is None:
        return None
    fmt = cpb.AudioFormat()
    if value is not None:
        fmt.encoding, fmt.sample_rate_hz = _format_value(value, param, allowed)
    if rate is not None:
        fmt.sample_rate_hz = _positive_int(rate, rate_param)
    encoding = fmt.encoding or current
    if encoding in af.G711 and not fmt.sample_rate_hz:
        fmt.sample_rate_hz = af.G711_RATE
    # Output PCM rates are the session's to judge: it knows what the voice makes.
    checked = current is not None or encoding in af.G711
    if encoding is not None and checked and fmt.sample_rate_hz:
        _check_rate(encoding, fmt.sample_rate_hz, f"{param}.rate")
    return fmt


def _turn_detection(value: Any, param: str) -> cpb.TurnDetection:
    if value is None:
        return cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_NONE)
    td = _obj(value, param)
    kind = td.get("type", "server_vad")
    if kind == "semantic_vad":
        out = cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_SEMANTIC_VAD)
        if td.get("eagerness") is not None:
            # Its values are the session's to judge (session_config.EAGERNESS).
            out.eagerness = _str(td["eagerness"], f"{param}.eagerness")
    elif kind == "server_vad":
        out = cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_SERVER_VAD)
        if td.get("threshold") is not None:
            out.threshold = _number(td["threshold"], f"{param}.threshold")
        for key in ("prefix_padding_ms", "silence_duration_ms"):
            if td.get(key) is not None:
                setattr(out, key, _non_negative_int(td[key], f"{param}.{key}", INT32_MAX))
    else:
        raise ClientError(
            "unsupported_turn_detection",
            f"turn_detection.type {kind!r} is unsupported; "
            "use 'server_vad', 'semantic_vad' or null",
            param=param,
        )
    out.create_response = _bool(td.get("create_response", True), f"{param}.create_response")
    out.interrupt_response = _bool(
        td.get("interrupt_response", True), f"{param}.interrupt_response"
    )
    return out
