"""GPT-Live client events -> typed commands (the dialect's inbound half).

Strict as OpenAI is: every event's keys are its own (`unknown_parameter`
names a stranger), `session.start` comes first (`session_not_started`
before it) and once. What each event does here:

- `session.start`: opens the session (`start_config`).
- `session.input_audio.append`: base64 audio in the start's format,
  decoded once; more than an append may carry is refused
  (`audio_too_large`). It advances the timeline, which may release output.
  Muted, the model hears zeros of the same length: the timeline goes on.
- `session.input_audio.mute` / `.unmute`: answered here at once
  (`session.input_audio.muted` / `.unmuted`).
- `session.instructions.append`, `.thinking.append`, `.commentary.append`:
  text into the running model's context (`AppendContext`); the session
  refuses it for a backend that does not take it, and says
  `session.*.appended` when the model has taken it.
- `session.update`: the delegation's settings only (`live.delegation`),
  held and answered here (`session.updated`).
- `response.item.create` / `response.create` (Responses delegation only):
  an item of the delegated conversation (the session's history), and a
  delegated answer with the delegation's settings (`CreateResponse.delegated`).
- Decisions and fixtures: not served, `unsupported_capability`.
- `session.close`: ends the session (`session.closed`, `close_requested`).
"""

from __future__ import annotations

from collections.abc import Callable

from antiphon.common.ids import new_id
from antiphon.gateway.dialects.halves import Json
from antiphon.gateway.errors import ClientError, not_unicode
from antiphon.gateway.live import delegation
from antiphon.gateway.live.delegation import Delegation
from antiphon.gateway.live.live_state import LiveState
from antiphon.gateway.live.responses_items import responses_item
from antiphon.gateway.live.start_config import start_config
from antiphon.gateway.translate import fields
from antiphon.gateway.translate.audio_formats import base64_audio, decode_field
from antiphon.gateway.translate.commands import within_append_limit
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb

START = "session.start"
_ENVELOPE = frozenset({"type", "event_id"})
# What a client may append to the running model's context (`session.<channel>.append`).
CHANNELS = ("instructions", "thinking", "commentary")
CONTEXT_CHANNELS = tuple(f"session.{channel}.append" for channel in CHANNELS)
# Client types the SDK knows that this server does not serve yet, and why.
NOT_SERVED = {
    "decision.create": "Decisions are not served",
    "decision.item.create": "Decisions are not served",
    "decision.item.delete": "Decisions are not served",
    "session.output_audio.fixture.play": "audio fixtures are not served",
}


# Every GPT-Live client event type (the SDK's `ClientEvent`), served or not.
CLIENT_TYPES = frozenset(
    {
        START,
        "session.input_audio.append",
        "session.input_audio.mute",
        "session.input_audio.unmute",
        *CONTEXT_CHANNELS,
        "session.update",
        "response.item.create",
        "response.create",
        "session.close",
        *NOT_SERVED,
    }
)


class LiveInterpreter:
    def __init__(self, state: LiveState) -> None:
        self._state = state

    def open(self, event: Json, query: dict[str, str]) -> spb.ClientCommand:
        try:
            return self._open(event)
        except UnicodeEncodeError as exc:
            raise not_unicode() from exc

    def _open(self, event: Json) -> spb.ClientCommand:
        etype = _type(event)
        if etype != START:
            raise ClientError(
                "session_not_started",
                f"send {START} first, and wait for session.started ({etype!r} came before it)",
                param="type",
            )
        if self._state.lent.pinned is not None:
            # A client secret pins a Realtime configuration this surface cannot
            # hold it to: refused rather than ignored.
            raise ClientError(
                "unsupported_capability",
                "client secrets are not served on GPT-Live yet; use an API key",
                param="type",
            )
        fields.known_keys(event, _ENVELOPE | {"session"})
        config = start_config(event)
        event_id = fields.client_event_id(event)
        self._state.start(config, event_id)
        open_ = spb.OpenSession(config=config.patch)
        return spb.ClientCommand(client_type=START, event_id=event_id, open=open_)

    def connect(self, query: dict[str, str]) -> spb.ClientCommand:
        raise ClientError("session_not_started", f"send {START} first")

    def adopt(self, config: cpb.SessionConfig) -> None:
        """Nothing to adopt: a GPT-Live socket never resumes a session."""

    def translate(self, event: Json) -> spb.ClientCommand | None:
        try:
            return self._translate(event)
        except UnicodeEncodeError as exc:
            raise not_unicode() from exc

    def _translate(self, event: Json) -> spb.ClientCommand | None:
        etype = _type(event)
        build = _EVENTS.get(etype)
        if build is None:
            if etype in NOT_SERVED:
                raise ClientError(
                    "unsupported_capability", f"{etype}: {NOT_SERVED[etype]}", param="type"
                )
            raise ClientError("invalid_value", f"Invalid value: {etype!r}.", param="type")
        cmd = build(self, event)
        if cmd is not None:
            cmd.client_type = etype
            cmd.event_id = fields.client_event_id(event)
        return cmd

    # ---------------------------------------------------------- events
    def _start_again(self, event: Json) -> spb.ClientCommand | None:
        raise ClientError(
            "session_already_started",
            "the session has started; its configuration cannot change",
            param="type",
        )

    def _append(self, event: Json) -> spb.ClientCommand | None:
        fields.known_keys(event, _ENVELOPE | {"audio"})
        state, config, timeline = self._state, self._state.config, self._state.timeline
        assert config is not None and timeline is not None  # made by the start
        fmt = config.audio_format
        raw = base64_audio(fields.required(event, "audio"), "audio")
        pcm16 = decode_field(raw, fmt.encoding, "audio").pcm16
        append = spb.AppendAudio(pcm16=pcm16, sample_rate_hz=fmt.sample_rate_hz)
        cmd = within_append_limit(
            spb.ClientCommand(append_audio=append), state.lent.max_append_bytes
        )
        state.reflect(pcm16)
        if state.muted:
            # Muted input is silence on the model's timeline, not a pause of it.
            cmd.append_audio.pcm16 = bytes(len(pcm16))
        state.say(timeline.heard(len(pcm16) // 2))
        return cmd

    def _mute(self, event: Json) -> spb.ClientCommand | None:
        fields.known_keys(event, _ENVELOPE)
        muted = event["type"] == "session.input_audio.mute"
        self._state.muted = muted
        frame: Json = {
            "type": "session.input_audio.muted" if muted else "session.input_audio.unmuted",
            "event_id": new_id("event"),
            "client_event_id": fields.client_event_id(event) or None,
        }
        self._state.say([frame])
        return None

    def _context(self, event: Json) -> spb.ClientCommand | None:
        fields.known_keys(event, _ENVELOPE | {"content", "delegation_id"})
        text = fields.string(fields.required(event, "content"), "content")
        if event.get("delegation_id") is not None:
            # The voice model behind this surface never hands a task off.
            raise ClientError(
                "delegation_not_found",
                f"no delegation {event['delegation_id']!r}: this session has none",
                param="delegation_id",
            )
        channel = event["type"].split(".")[1]
        return spb.ClientCommand(append_context=spb.AppendContext(channel=channel, text=text))

    def _update(self, event: Json) -> spb.ClientCommand | None:
        """Only the delegation's settings change after the start; answered here."""
        fields.known_keys(event, _ENVELOPE | {"session"})
        s = fields.obj(fields.required(event, "session"), "session")
        fields.known_keys(s, frozenset({"delegation", "triggers"}), "session.")
        if s.get("triggers"):
            raise ClientError(
                "unsupported_capability", "Decisions triggers are not served", param="triggers"
            )
        state = self._state
        state.delegation = delegation.updated(state.delegation, s.get("delegation"))
        updated: Json = {
            "type": "session.updated",
            "event_id": new_id("event"),
            "session": state.resource(),
            "client_event_id": fields.client_event_id(event) or None,
        }
        state.say([updated])
        return None

    def _response_item(self, event: Json) -> spb.ClientCommand | None:
        fields.known_keys(event, _ENVELOPE | {"item"})
        self._responses_delegation()
        return spb.ClientCommand(create_item=responses_item(event))

    def _response_create(self, event: Json) -> spb.ClientCommand | None:
        fields.known_keys(event, _ENVELOPE)
        return spb.ClientCommand(create_response=self._responses_delegation().response())

    def _responses_delegation(self) -> Delegation:
        current = self._state.delegation
        if current is None or not current.served_by_responses:
            raise ClientError(
                "responses_delegation_required",
                "response.item.create and response.create need `delegation: {type: "
                "'responses'}` (set at session.start)",
                param="type",
            )
        return current

    def _close(self, event: Json) -> spb.ClientCommand | None:
        fields.known_keys(event, _ENVELOPE)
        self._state.close_event_id = fields.client_event_id(event)
        return spb.ClientCommand(close=spb.CloseSession())


_Build = Callable[[LiveInterpreter, Json], spb.ClientCommand | None]
_EVENTS: dict[str, _Build] = {
    START: LiveInterpreter._start_again,
    "session.input_audio.append": LiveInterpreter._append,
    "session.input_audio.mute": LiveInterpreter._mute,
    "session.input_audio.unmute": LiveInterpreter._mute,
    **{channel: LiveInterpreter._context for channel in CONTEXT_CHANNELS},
    "session.update": LiveInterpreter._update,
    "response.item.create": LiveInterpreter._response_item,
    "response.create": LiveInterpreter._response_create,
    "session.close": LiveInterpreter._close,
}


def _type(event: Json) -> str:
    t = event.get("type")
    if not isinstance(t, str) or not t:
        raise ClientError("missing_required_parameter", "every event needs a `type`", param="type")
    return t
