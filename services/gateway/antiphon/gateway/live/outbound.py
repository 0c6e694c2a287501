"""The session's typed events as GPT-Live frames (the dialect's outbound half).

GPT-Live has no responses, items or turns: what a client sees is the
session's start and end, one continuous output track with its transcript
spans (`timeline`), usage, and errors. So of the typed stream:

- `session_created` is `session.started` (the session resource: id,
  `expires_at`, `status: "active"`, the resolved config) when the bound
  backend is a model-native duplex model; otherwise the session ends at
  once with `invalid_model`: the cascade's turns (VAD, commit, answer,
  barge-in) are not what this protocol promises, and it is not served here.
- a response's audio deltas and transcript deltas feed the track;
  `response.done` / `response.listen` end the utterance (what is queued
  plays out without waiting for more).
- `session_closed` is `session.closed` (`close_requested`, answering the
  client's `session.close`); an expiry is `expired` (the age or idle limit)
  or `connection_lost` (its grace ran out, or the journal could not be
  replayed); the session service lost for good is `connection_lost` after
  its error. Each carries the final usage and the session resource.
- `context_appended` is `session.{instructions,thinking,commentary}.appended`
  once the model took the append: an instant on the track where it is then.
- a delegate LLM's answer (`Response.delegated`) is `response.event`s
  (`responses_stream`).
- `error` is OpenAI's error, with the client's `event_id` as
  `client_event_id` on the event and in its `error`.
- everything else (the response lifecycle, items, speech and VAD events,
  heartbeats) has no GPT-Live event and is not sent.
"""

from __future__ import annotations

from antiphon.common.event_kinds import kind_of
from antiphon.common.ids import new_id
from antiphon.gateway.connection.failover import SessionUnavailable
from antiphon.gateway.dialects.halves import Json
from antiphon.gateway.errors import ClientError
from antiphon.gateway.live.inbound import CHANNELS
from antiphon.gateway.live.live_state import LiveState
from antiphon.gateway.live.responses_stream import ResponsesStream
from antiphon.v1 import session_pb2 as spb

# `session_expired.reason` -> `session.closed.reason`.
EXPIRED = {
    "max_duration_expired": "expired",
    "idle_ttl_expired": "expired",
    "disconnect_grace_expired": "connection_lost",
}


class LiveProjector:
    def __init__(self, state: LiveState) -> None:
        self._state = state
        self._delegated = ResponsesStream(state.delegate_model)

    def __call__(self, ev: spb.ServerEvent) -> list[Json]:
        kind = kind_of(ev)
        if (envelopes := self._delegated(kind, ev)) is not None:
            return envelopes
        timeline = self._state.timeline
        match kind:
            case "session_created":
                return self._started(ev.session_created)
            case "audio_delta" if timeline is not None:
                return timeline.spoke(ev.audio_delta.audio)
            case "audio_transcript_delta" if timeline is not None:
                return timeline.said(ev.audio_transcript_delta.delta)
            case "response_done" | "response_listen" if timeline is not None:
                return timeline.quiet()
            case "context_appended" if timeline is not None:
                return _appended(ev.context_appended, timeline.played_ms)
            case "session_closed":
                return [self._closed("close_requested", self._state.close_event_id)]
            case "session_expired":
                return [self._closed(EXPIRED.get(ev.session_expired.reason, "expired"))]
            case "session_replaced" | "resync_required":
                return [self._closed("connection_lost")]
            case "error":
                return self._error(ev.error)
        return []

    def _started(self, st: spb.SessionState) -> list[Json]:
        held = self._state.started(st)
        if not st.capabilities.model_native:
            self._state.lent.refuse(
                ClientError(
                    "invalid_model",
                    f"{st.config.model!r} is served by a turn-based backend "
                    f"({st.capabilities.implementation_level}); GPT-Live is served by "
                    "model-native duplex backends only (docs/gpt-live.md)",
                    param="session.model",
                )
            )
            return []
        return [
            {
                "type": "session.started",
                "event_id": new_id("event"),
                "session": self._state.resource(),
                **_answering(self._state.start_event_id),
            },
            *held,
        ]

    def _closed(self, reason: str, client_event_id: str = "") -> Json:
        timeline = self._state.timeline
        return {
            "type": "session.closed",
            "event_id": new_id("event"),
            "reason": reason,
            "session": self._state.resource(),
            "usage": timeline.usage() if timeline else {"seconds": 0.0},
            **_answering(client_event_id),
        }

    def _error(self, e: spb.ErrorEvent) -> list[Json]:
        error: Json = {
            "type": e.type,
            "code": e.code,
            "message": e.message,
            "param": e.param or None,
        }
        error.update(_answering(e.event_id))
        frame: Json = {
            "type": "error",
            "event_id": new_id("event"),
            "error": error,
            **_answering(e.event_id),
        }
        if e.code == SessionUnavailable.code and self._state.session is not None:
            # No session replica took the session back: it is lost to this client.
            return [frame, self._closed("connection_lost")]
        return [frame]


def _appended(e: spb.ContextAppended, at_ms: int) -> list[Json]:
    """The model took an append: an instant on the track, where it is now
    (the model's next frames, the first to follow it, play from there).
    A delegated answer the session put there itself is no client's append."""
    if e.channel not in CHANNELS:
        return []
    return [
        {
            "type": f"session.{e.channel}.appended",
            "event_id": new_id("event"),
            "start_ms": at_ms,
            "end_ms": at_ms,
            **_answering(e.client_event_id),
        }
    ]


def _answering(client_event_id: str) -> Json:
    """`client_event_id`, where a client event is answered (absent otherwise)."""
    return {"client_event_id": client_event_id} if client_event_id else {}
