"""Server events as typed objects: one class per kind a client acts on.

`parse` turns a wire frame (OpenAI's dialect or the duplex one: the duplex
dialect is OpenAI's names plus extensions, so one table serves both) into
the class of its type; a type the table does not know is a plain `Event`.
Every event keeps its wire dict in `raw` and the client's monotonic clock at
the moment its frame was read in `received_at`.
"""

from __future__ import annotations

import base64
import functools
import json
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Event:
    raw: dict[str, Any]
    received_at: float = 0.0

    types: ClassVar[tuple[str, ...]] = ()

    @property
    def type(self) -> str:
        return str(self.raw.get("type", ""))

    @property
    def event_id(self) -> str:
        return str(self.raw.get("event_id", ""))

    @property
    def seq(self) -> int | None:
        """`server_event_seq`: the duplex dialect's replay cursor (None in OpenAI's)."""
        seq = self.raw.get("server_event_seq")
        return int(seq) if seq is not None else None

    @property
    def response_id(self) -> str:
        raw = self.raw
        response = raw.get("response")
        if isinstance(response, dict) and response.get("id"):
            return str(response["id"])
        return str(raw.get("response_id") or "")

    @property
    def item_id(self) -> str:
        item = self.raw.get("item")
        if isinstance(item, dict) and item.get("id"):
            return str(item["id"])
        return str(self.raw.get("item_id") or "")

    def __str__(self) -> str:
        return pretty(self.raw)


@dataclass(frozen=True)
class SessionEvent(Event):
    """`session.created` / `.updated` / `.resumed`: the session as the server holds it."""

    types = ("session.created", "session.updated", "session.resumed")

    @property
    def session(self) -> dict[str, Any]:
        return dict(self.raw.get("session") or {})

    @property
    def session_id(self) -> str:
        return str(self.session.get("id") or self.raw.get("session_id") or "")


@dataclass(frozen=True)
class SessionEnded(Event):
    """The session is over: closed, expired, replaced by another socket, or out of sync."""

    types = (
        "session.closed",
        "session.expired",
        "session.replaced",
        "session.resync_required",
    )

    @property
    def reason(self) -> str:
        return str(self.raw.get("reason") or self.type.removeprefix("session."))


@dataclass(frozen=True)
class Resumed(Event):
    """Not a wire event: the client lost its connection and resumed the session.
    Every event in between was replayed, each exactly once."""

    types = ("client.resumed",)


@dataclass(frozen=True)
class ErrorEvent(Event):
    types = ("error",)

    @property
    def code(self) -> str:
        return str((self.raw.get("error") or {}).get("code") or "")

    @property
    def message(self) -> str:
        return str((self.raw.get("error") or {}).get("message") or "")

    @property
    def related_event_id(self) -> str:
        return str((self.raw.get("error") or {}).get("event_id") or "")


@dataclass(frozen=True)
class SpeechStarted(Event):
    types = ("input_audio_buffer.speech_started",)


@dataclass(frozen=True)
class SpeechStopped(Event):
    types = ("input_audio_buffer.speech_stopped",)


@dataclass(frozen=True)
class Committed(Event):
    types = ("input_audio_buffer.committed",)


@dataclass(frozen=True)
class InputTranscript(Event):
    """What the server heard the user say."""

    types = ("conversation.item.input_audio_transcription.completed",)

    @property
    def transcript(self) -> str:
        return str(self.raw.get("transcript") or "")


@dataclass(frozen=True)
class InputTranscriptDelta(Event):
    """More of what the server hears the user say, while they speak: an item's
    deltas, joined, begin its `InputTranscript`."""

    types = ("conversation.item.input_audio_transcription.delta",)

    @property
    def item_id(self) -> str:
        return str(self.raw.get("item_id") or "")

    @property
    def delta(self) -> str:
        return str(self.raw.get("delta") or "")


@dataclass(frozen=True)
class ResponseCreated(Event):
    types = ("response.created",)


@dataclass(frozen=True)
class AudioDelta(Event):
    types = ("response.output_audio.delta", "response.audio.delta")

    @functools.cached_property
    def audio(self) -> bytes:
        """Decoded once: a handle, a collector and the caller all read it."""
        return base64.b64decode(self.raw.get("delta") or "")

    @property
    def sample_rate_hz(self) -> int | None:
        """Named by the duplex dialect; OpenAI's leaves it to the session's format."""
        rate = self.raw.get("sample_rate_hz")
        return int(rate) if rate else None


@dataclass(frozen=True)
class TranscriptDelta(Event):
    """Words of the answer being said, as its audio goes out."""

    types = ("response.output_audio_transcript.delta", "response.audio_transcript.delta")

    @property
    def text(self) -> str:
        return str(self.raw.get("delta") or "")


@dataclass(frozen=True)
class TextDelta(Event):
    types = ("response.output_text.delta", "response.text.delta")

    @property
    def text(self) -> str:
        return str(self.raw.get("delta") or "")


@dataclass(frozen=True)
class FunctionCall(Event):
    """A function the model called, with its whole arguments."""

    types = ("response.function_call_arguments.done",)

    @property
    def name(self) -> str:
        return str(self.raw.get("name") or "")

    @property
    def call_id(self) -> str:
        return str(self.raw.get("call_id") or "")

    @property
    def arguments(self) -> dict[str, Any]:
        parsed = json.loads(self.raw.get("arguments") or "{}")
        return parsed if isinstance(parsed, dict) else {"value": parsed}


@dataclass(frozen=True)
class Decision(Event):
    """Duplex: the model chose to speak or to keep listening."""

    types = ("response.speak", "response.listen")

    @property
    def decision(self) -> str:
        return self.type.removeprefix("response.")


@dataclass(frozen=True)
class ResponseDone(Event):
    types = ("response.done",)

    @property
    def status(self) -> str:
        return str((self.raw.get("response") or {}).get("status") or "")

    @property
    def reason(self) -> str:
        details = (self.raw.get("response") or {}).get("status_details") or {}
        return str(details.get("reason") or "")


KINDS: dict[str, type[Event]] = {
    t: kind
    for kind in (
        SessionEvent,
        SessionEnded,
        Resumed,
        ErrorEvent,
        SpeechStarted,
        SpeechStopped,
        Committed,
        InputTranscript,
        InputTranscriptDelta,
        ResponseCreated,
        AudioDelta,
        TranscriptDelta,
        TextDelta,
        FunctionCall,
        Decision,
        ResponseDone,
    )
    for t in kind.types
}


def parse(raw: dict[str, Any], received_at: float = 0.0) -> Event:
    return KINDS.get(str(raw.get("type", "")), Event)(raw, received_at)


def pretty(raw: dict[str, Any], width: int = 60) -> str:
    """One line per event for a wire log: base64 audio shown by its size, not its bytes."""
    shown = {k: v for k, v in raw.items() if k != "type"}
    for key in ("delta", "audio"):
        value = shown.get(key)
        if raw.get("type", "").endswith(("audio.delta", "audio_buffer.append")) and value:
            shown[key] = f"<{len(base64.b64decode(value))} bytes>"
    body = json.dumps(shown, ensure_ascii=False)
    if len(body) > width * 4:
        body = body[: width * 4 - 1] + "…"
    return f"{raw.get('type', '?'):<{width // 2}} {body}"
