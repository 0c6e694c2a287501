"""Client JSON -> typed `ClientCommand`: alias normalisation and dispatch.

The translator accepts both generations of OpenAI's Realtime spellings (the
beta `input_audio_format: "pcm16"` and the GA `audio.input.format` object)
and the reference's duplex extensions. Each canonical client event type has
one builder (`HANDLERS`): here those that read the connection's declared
input encoding, in `commands` those that need nothing but their event. The
builders read fields through `fields`, session objects through
`session_patch`, items through `items` and audio through `audio_formats`,
where base64 audio is decoded, once, to PCM16. An invalid
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
from antiphon.gateway.edge.pinned import PinnedConfig
from antiphon.gateway.errors import ClientError, not_unicode
from antiphon.gateway.translate import commands, fields
from antiphon.gateway.translate.audio_formats import WAV, base64_audio, decode_field, event_format
from antiphon.gateway.translate.fields import Event
from antiphon.gateway.translate.items import create_item, item_ref, truncation
from antiphon.gateway.translate.session_patch import session_patch, with_query
from antiphon.gateway.translate.video_frames import max_slice_nums, video_frames
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


def canonical_type(event: Event) -> str:
    t = event.get("type")
    if not isinstance(t, str) or not t:
        raise ClientError("invalid_event", "every event needs a string `type`", param="type")
    return ALIASES.get(t, t)


def metric_label(event: Event, dialect_types: frozenset[str] | None = None) -> str:
    """The event's type as a metric label; client-made names collapse to one,
    so a client cannot grow the metric's series without bound. A dialect's
    own types (`dialect_types`: GPT-Live's) count as known."""
    t = event.get("type")
    if not isinstance(t, str):  # a list or object type is unhashable: never a lookup key
        return "unknown"
    known = t in ALIASES or t in HANDLERS or t == "session.resume" or t in (dialect_types or ())
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
            raise not_unicode() from exc

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
            raise not_unicode() from exc

    def _open(self, event: Event, query: dict[str, str]) -> spb.ClientCommand:
        etype = canonical_type(event)
        if etype == "session.resume":
            return commands.resume(event)
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
        if event.get("video_frames") is not None:
            append.video_frames.extend(video_frames(event["video_frames"]))
        if event.get("max_slice_nums") is not None:
            append.max_slice_nums = max_slice_nums(event["max_slice_nums"])
        return spb.ClientCommand(append_audio=append)

    def _create_item(self, event: Event) -> spb.ClientCommand:
        return spb.ClientCommand(create_item=create_item(event, self._input_encoding))


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
    "input_audio_buffer.commit": _stateless(commands.commit),
    "input_audio_buffer.clear": _fixed(spb.ClientCommand(clear_input=spb.ClearInput())),
    "input.cancel": _fixed(spb.ClientCommand(cancel_input=spb.CancelInput())),
    "input.text.append": _stateless(commands.append_text),
    "conversation.item.create": Translator._create_item,
    "conversation.item.retrieve": _stateless(
        lambda event: spb.ClientCommand(retrieve_item=item_ref(event))
    ),
    "conversation.item.delete": _stateless(
        lambda event: spb.ClientCommand(delete_item=item_ref(event))
    ),
    "conversation.item.truncate": _stateless(
        lambda event: spb.ClientCommand(truncate_item=truncation(event))
    ),
    "response.create": _stateless(commands.response_create),
    "response.cancel": _stateless(commands.response_cancel),
    "output_audio_buffer.clear": _fixed(
        spb.ClientCommand(clear_output_audio=spb.ClearOutputAudio())
    ),
    "barge_in": _stateless(commands.barge_in),
    "turn.signal": _stateless(commands.turn_signal),
    "playback.ack": _stateless(commands.playback_ack),
    "session.close": _fixed(spb.ClientCommand(close=spb.CloseSession())),
    "session.heartbeat": _fixed(spb.ClientCommand(heartbeat=spb.Heartbeat())),
    "session.event_ack": _stateless(commands.event_ack),
}
