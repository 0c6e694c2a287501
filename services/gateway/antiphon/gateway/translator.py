"""Client JSON -> typed `ClientCommand`: alias normalisation and dispatch.

The translator accepts both generations of OpenAI's Realtime spellings (the
beta `input_audio_format: "pcm16"` and the GA `audio.input.format` object)
and the reference's duplex extensions. Each canonical client event type has
one builder (`HANDLERS`); the builders read fields through `fields`, session
objects through `session_patch`, items through `items` and audio through
`audio_formats`, where base64 audio is decoded, once, to PCM16. An invalid
event raises one ClientError and yields no command, so a refused event
changes nothing.

A dialect may take fewer client types than the translator knows (OpenAI's
dialect takes OpenAI's own, `client_types`): another type is refused as
OpenAI refuses an unknown one.

The only thing it remembers is the input encoding the client last declared,
because appends that name no `format` are in it; the session service owns
the effective configuration (and resamples input to it). A socket that
resumed a session starts from the session's own input encoding (`adopt`).
"""

from __future__ import annotations

from collections.abc import Callable

from antiphon.common.audio_formats import PCM16
from antiphon.common.ids import valid_session_id
from antiphon.gateway import fields, tools
from antiphon.gateway.audio_formats import WAV, base64_audio, decode_field, event_format
from antiphon.gateway.errors import ClientError
from antiphon.gateway.fields import Event
from antiphon.gateway.items import create_item
from antiphon.gateway.pinned import PinnedConfig
from antiphon.gateway.session_patch import session_patch, with_query
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

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
# The turn signals `turn.signal` carries; the reference defines only barge-in.
TURN_SIGNALS = ("barge_in",)
# `barge_in.source` when the client names none.
CLIENT_SIGNAL_SOURCE = "client_event"


def canonical_type(event: Event) -> str:
    t = event.get("type")
    if not isinstance(t, str) or not t:
        raise ClientError("invalid_event", "every event needs a string `type`", param="type")
    return ALIASES.get(t, t)


def metric_label(event: Event) -> str:
    """The event's type as a metric label; client-made names collapse to one,
    so a client cannot grow the metric's series without bound."""
    t = event.get("type")
    if not isinstance(t, str):  # a list or object type is unhashable: never a lookup key
        return "unknown"
    known = t in ALIASES or t in HANDLERS or t == "session.resume"
    return t if known else "unknown"


class Translator:
    """Translates one connection's client events.

    `client_types`: the client event types (as sent, aliases included) this
    connection's dialect takes; None takes every type the translator knows.
    """

    def __init__(
        self, client_types: frozenset[str] | None = None, pinned: PinnedConfig | None = None
    ) -> None:
        # The client's declaration, not the session's echo: an append sent
        # right after a session.update is already in the new encoding, before
        # the echo can come back.
        self._input_encoding = PCM16
        self._declared = False
        self._client_types = client_types
        # A client secret's config: applied at the open, unchangeable after.
        self._pinned = pinned

    def translate(self, event: Event) -> spb.ClientCommand:
        """The typed command for one client event; raises ClientError."""
        try:
            return self._translate(event)
        except UnicodeEncodeError as exc:
            raise _not_unicode() from exc

    def _translate(self, event: Event) -> spb.ClientCommand:
        if self._client_types is not None:
            fields.only(event, self._client_types)
        etype = canonical_type(event)
        if etype == "session.resume":
            raise ClientError(
                "session_already_open",
                "session.resume is only valid as the first event of a new connection",
                param="type",
            )
        handler = HANDLERS.get(etype)
        if handler is None:
            raise ClientError("invalid_event", f"unknown event type {etype!r}", param="type")
        cmd = handler(self, event)
        if self._pinned is not None and cmd.HasField("create_response"):
            self._pinned.check(cmd.create_response, "response")
        cmd.client_type = etype
        event_id = event.get("event_id")
        if isinstance(event_id, str):
            cmd.event_id = event_id
        op = event.get("operation_id")
        if isinstance(op, str):
            cmd.operation_id = op
        return cmd

    def open(self, event: Event, query: dict[str, str]) -> spb.ClientCommand:
        """The handshake: `session.update` opens (with URL query defaults),
        `session.resume` re-attaches; `?autostart=0` allows only the latter."""
        try:
            return self._open(event, query)
        except UnicodeEncodeError as exc:
            raise _not_unicode() from exc

    def _open(self, event: Event, query: dict[str, str]) -> spb.ClientCommand:
        etype = canonical_type(event)
        if etype == "session.resume":
            return _resume(event)
        if etype != "session.update" or query.get("autostart") == "0":
            expected = "session.resume" if query.get("autostart") == "0" else "session.update"
            raise ClientError(
                "session_not_open",
                f"the first event must be {expected} (the open handshake)",
                param="type",
            )
        patch = session_patch(event, self._input_encoding)
        if self._pinned is not None:
            self._pinned.check(patch, "session")
            self._pinned.apply(patch)
        patch = with_query(patch, query)
        cmd = spb.ClientCommand(client_type="session.update", open=spb.OpenSession(config=patch))
        if isinstance(event.get("event_id"), str):
            cmd.event_id = event["event_id"]
        self._declare(patch)
        return cmd

    def connect(self, query: dict[str, str]) -> spb.ClientCommand:
        """The open of a dialect that opens on connect (OpenAI's): the server's
        defaults, a client secret's config and what the URL query sets (which
        cannot change the secret's), before any client event."""
        patch = cpb.SessionConfigPatch()
        if self._pinned is not None:
            self._declare(self._pinned.apply(patch))
        patch = with_query(patch, query)
        return spb.ClientCommand(
            client_type="websocket.connect",
            open=spb.OpenSession(config=patch, on_connect=True),
        )

    def adopt(self, config: cpb.SessionConfig) -> None:
        """A resumed session's input encoding (`session.resumed`), unless the
        client already declared one on this socket: its own word is newer."""
        if not self._declared:
            self._input_encoding = config.input_audio_format.encoding or PCM16

    def _declare(self, patch: cpb.SessionConfigPatch) -> None:
        """Remember a valid patch's input encoding (only once nothing can refuse it)."""
        if patch.input_audio_format.encoding:
            self._input_encoding = patch.input_audio_format.encoding
            self._declared = True

    # The builders that read or set the declared input encoding; the others
    # are plain functions of the event, below.
    def _update(self, event: Event) -> spb.ClientCommand:
        patch = session_patch(event, self._input_encoding)
        if self._pinned is not None:
            self._pinned.check(patch, "session")
        self._declare(patch)
        return spb.ClientCommand(update=spb.UpdateSession(config=patch))

    def _append(self, event: Event) -> spb.ClientCommand:
        key = "chunk" if "audio" not in event and "chunk" in event else "audio"
        raw = base64_audio(fields.required(event, key, "audio"), "audio")
        default = WAV if event.get("type") in LEGACY_APPEND_TYPES else self._input_encoding
        encoding, rate = event_format(event, default)
        pcm = decode_field(raw, encoding, "audio")
        if rate and pcm.sample_rate_hz and rate != pcm.sample_rate_hz:
            raise ClientError(
                "invalid_value",
                f"sample_rate_hz {rate} disagrees with the audio's own {pcm.sample_rate_hz} Hz",
                param="sample_rate_hz",
            )
        append = spb.AppendAudio(pcm16=pcm.pcm16, sample_rate_hz=pcm.sample_rate_hz or rate)
        is_speech = event.get("is_speech")
        if is_speech is not None:
            append.is_speech = fields.boolean(is_speech, "is_speech")
        return spb.ClientCommand(append_audio=append)

    def _create_item(self, event: Event) -> spb.ClientCommand:
        return spb.ClientCommand(create_item=create_item(event, self._input_encoding))


def _not_unicode() -> ClientError:
    # JSON may escape a lone UTF-16 surrogate ("\\ud800"); no protobuf string holds one.
    return ClientError("invalid_value", "strings must be valid Unicode (no lone UTF-16 surrogates)")


# ----------------------------------------------------------- stateless builders
def _resume(event: Event) -> spb.ClientCommand:
    session_id = fields.string(fields.required(event, "session_id"), "session_id")
    if not valid_session_id(session_id):
        raise ClientError("invalid_value", "`session_id` is not a session id", param="session_id")
    resume = spb.ResumeSession(
        session_id=session_id,
        incarnation=fields.non_negative_int(event.get("incarnation", 0), "incarnation"),
        resume_token=fields.string(fields.required(event, "resume_token"), "resume_token"),
        last_received_seq=fields.non_negative_int(
            event.get("last_received_server_event_seq", 0), "last_received_server_event_seq"
        ),
    )
    cmd = spb.ClientCommand(client_type="session.resume", resume=resume)
    if isinstance(event.get("event_id"), str):
        cmd.event_id = event["event_id"]
    return cmd


def _event_ack(event: Event) -> spb.ClientCommand:
    seq = fields.non_negative_int(fields.required(event, "server_event_seq"), "server_event_seq")
    return spb.ClientCommand(event_ack=spb.EventAck(seq=seq))


def _commit(event: Event) -> spb.ClientCommand:
    commit = spb.CommitInput()
    if event.get("is_speech") is not None:
        commit.is_speech = fields.boolean(event["is_speech"], "is_speech")
    return spb.ClientCommand(commit=commit)


def _append_text(event: Event) -> spb.ClientCommand:
    text = fields.non_empty_string(fields.required(event, "text"), "text")
    return spb.ClientCommand(append_text=spb.AppendText(text=text))


def _item_id(event: Event) -> str:
    return fields.non_empty_string(fields.required(event, "item_id"), "item_id")


def _retrieve_item(event: Event) -> spb.ClientCommand:
    return spb.ClientCommand(retrieve_item=spb.ItemRef(item_id=_item_id(event)))


def _delete_item(event: Event) -> spb.ClientCommand:
    return spb.ClientCommand(delete_item=spb.ItemRef(item_id=_item_id(event)))


def _truncate_item(event: Event) -> spb.ClientCommand:
    truncate = spb.TruncateItem(
        item_id=_item_id(event),
        content_index=fields.non_negative_int(
            fields.required(event, "content_index"), "content_index", fields.INT32_MAX
        ),
        audio_end_ms=fields.non_negative_int(
            fields.required(event, "audio_end_ms"), "audio_end_ms"
        ),
    )
    return spb.ClientCommand(truncate_item=truncate)


def _response_create(event: Event) -> spb.ClientCommand:
    body = event.get("response") or {}
    if not isinstance(body, dict):
        raise ClientError("invalid_value", "`response` must be an object", param="response")
    req = spb.CreateResponse()
    # null is "not given" (LiveKit's `generate_reply()` sends it): the session's apply.
    if body.get("instructions") is not None:
        req.instructions = fields.string(body["instructions"], "response.instructions")
    modalities = body.get("output_modalities", body.get("modalities"))
    if modalities is not None:
        req.output_modalities.extend(fields.string_list(modalities, "response.output_modalities"))
    if body.get("temperature") is not None:
        req.temperature = fields.number(body["temperature"], "response.temperature")
    tokens = body.get("max_output_tokens", body.get("max_response_output_tokens"))
    if tokens is not None:
        req.max_output_tokens = fields.max_tokens(tokens, "response.max_output_tokens")
    tools.read_into(body, req, "response")
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise ClientError(
                "invalid_value", "`metadata` must be an object", param="response.metadata"
            )
        req.metadata.update({str(k): str(v) for k, v in metadata.items()})
    return spb.ClientCommand(create_response=req)


def _response_cancel(event: Event) -> spb.ClientCommand:
    rid = event.get("response_id") or ""
    return spb.ClientCommand(
        cancel_response=spb.CancelResponse(response_id=fields.string(rid, "response_id"))
    )


def _barge_in_signal(source: object, param: str) -> spb.BargeIn:
    if source is None:
        return spb.BargeIn(source=CLIENT_SIGNAL_SOURCE)
    return spb.BargeIn(source=fields.non_empty_string(source, param))


def _barge_in(event: Event) -> spb.ClientCommand:
    return spb.ClientCommand(barge_in=_barge_in_signal(event.get("source"), "source"))


def _turn_signal(event: Event) -> spb.ClientCommand:
    signal = fields.string(fields.required(event, "event"), "event")
    if signal not in TURN_SIGNALS:
        raise ClientError(
            "invalid_value",
            f"turn.signal event {signal!r} is not supported; use one of {TURN_SIGNALS}",
            param="event",
        )
    payload = fields.obj(event.get("payload"), "payload")
    return spb.ClientCommand(barge_in=_barge_in_signal(payload.get("source"), "payload.source"))


def _playback_ack(event: Event) -> spb.ClientCommand:
    ack = spb.PlaybackAck(
        response_id=fields.non_empty_string(fields.required(event, "response_id"), "response_id"),
        played_ms=fields.non_negative_int(fields.required(event, "played_ms"), "played_ms"),
    )
    if event.get("item_id") is not None:
        ack.item_id = fields.non_empty_string(event["item_id"], "item_id")
    if event.get("committed_ms") is not None:
        ack.committed_ms = fields.non_negative_int(event["committed_ms"], "committed_ms")
        if ack.committed_ms > ack.played_ms:
            raise ClientError(
                "invalid_value",
                "`committed_ms` cannot exceed `played_ms`: only played audio can be committed",
                param="committed_ms",
            )
    if event.get("truncate") is not None:
        ack.truncate = fields.boolean(event["truncate"], "truncate")
    return spb.ClientCommand(playback_ack=ack)


# A builder gets the connection's translator (for the declared input
# encoding) and the event; mypy checks every entry of HANDLERS against this.
Handler = Callable[[Translator, Event], spb.ClientCommand]


def _stateless(build: Callable[[Event], spb.ClientCommand]) -> Handler:
    """A builder that needs no translator state, as a table entry."""
    return lambda _translator, event: build(event)


def _fixed(command: spb.ClientCommand) -> Handler:
    """The builder of an event whose command takes nothing from it: a fresh
    copy each time, since `translate` stamps the copy with the event's ids."""

    def build(_translator: Translator, _event: Event) -> spb.ClientCommand:
        out = spb.ClientCommand()
        out.CopyFrom(command)
        return out

    return build


# Canonical client event type -> the builder of its command.
HANDLERS: dict[str, Handler] = {
    "session.update": Translator._update,
    "input_audio_buffer.append": Translator._append,
    "input_audio_buffer.commit": _stateless(_commit),
    "input_audio_buffer.clear": _fixed(spb.ClientCommand(clear_input=spb.ClearInput())),
    "input.cancel": _fixed(spb.ClientCommand(cancel_input=spb.CancelInput())),
    "input.text.append": _stateless(_append_text),
    "conversation.item.create": Translator._create_item,
    "conversation.item.retrieve": _stateless(_retrieve_item),
    "conversation.item.delete": _stateless(_delete_item),
    "conversation.item.truncate": _stateless(_truncate_item),
    "response.create": _stateless(_response_create),
    "response.cancel": _stateless(_response_cancel),
    "output_audio_buffer.clear": _fixed(
        spb.ClientCommand(clear_output_audio=spb.ClearOutputAudio())
    ),
    "barge_in": _stateless(_barge_in),
    "turn.signal": _stateless(_turn_signal),
    "playback.ack": _stateless(_playback_ack),
    "session.close": _fixed(spb.ClientCommand(close=spb.CloseSession())),
    "session.heartbeat": _fixed(spb.ClientCommand(heartbeat=spb.Heartbeat())),
    "session.event_ack": _stateless(_event_ack),
}
