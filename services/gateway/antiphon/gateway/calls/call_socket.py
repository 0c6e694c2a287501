"""A WebRTC call as a `ClientSocket` (connection.py): the session's events
on the call's `oai-events` data channel, its audio on the call's tracks.

To `Connection` a call looks like a WebSocket: `receive` gives the caller's
data channel messages, and its microphone track's audio as typed appends of
raw PCM (call_audio.Microphone); `send` writes every event to the channel,
and the answer's audio comes as the session typed it (`audio_out`) to be
played on the call's track (call_audio.Speaker): audio is never JSON here.
Around that audio the channel says `output_audio_buffer.started` /
`.stopped`, and `.cleared` when a barge-in or the client's
`output_audio_buffer.clear` dropped the rest, after which the item cut short
is truncated where the caller stopped hearing it. `.stopped` means no more
audio is coming, as OpenAI's calls say it: the speaker ran dry *and* the
response is done. A speaker that runs dry mid-answer (a slow voice between
two sentences) is still the answer's, and a barge-in there still clears it.
A server's WebSocket may watch and drive the call (`attach`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocket

from antiphon.common.ids import new_id
from antiphon.gateway.calls.call_audio import SESSION_RATE, Speaker
from antiphon.gateway.calls.call_media import CallMedia
from antiphon.gateway.connection.fan_out import FanOut, relay
from antiphon.v1 import session_pb2 as spb

# Events an attached WebSocket may have unread before it is dropped.
WATCHER_BACKLOG = 4096
# What a microphone's piece is to the session: the append a client would send.
_APPEND = "input_audio_buffer.append"


class CallSocket(CallMedia):
    """One call as a `ClientSocket`: events on its data channel, audio on
    its tracks."""

    def __init__(
        self, query: Mapping[str, str], media_timeout_s: float, *, append_ms: int = 100
    ) -> None:
        super().__init__(media_timeout_s, Speaker(on_drained=self._drained), append_ms=append_ms)
        self.query = query
        # The answer on the speaker, from `.started` to `.stopped`/`.cleared`
        # ("" when none), and whether its response may still send audio.
        self._response_id = ""
        self._response_open = False
        self._cut_response = ""  # the last answer cut short: what it still sends is dropped
        # What the speaker was given since the answer started, item by item.
        self._queued: list[_Queued] = []
        self._watchers = FanOut(WATCHER_BACKLOG)

    # ------------------------------------------------ what the call gives
    def open_with(self, session: Mapping[str, Any]) -> None:
        """The call request's `session` config: the client's first event."""
        self._from_client(json.dumps({"type": "session.update", "session": dict(session)}))

    def _ended(self, why: str) -> None:
        self._watchers.close()  # the attached sockets close with it

    def _admit(self, text: str) -> str:
        return _without_formats(text)

    def _heard(self, pcm16: bytes) -> None:
        append = spb.AppendAudio(pcm16=pcm16, sample_rate_hz=SESSION_RATE)
        self._to_inbox(spb.ClientCommand(client_type=_APPEND, append_audio=append))

    async def attach(self, ws: WebSocket) -> None:
        """A server's WebSocket on this call, until either ends."""
        await relay(ws, self._watchers, lambda text, _events: self._from_client(text))

    # ------------------------------------------- ClientSocket, for Connection
    @property
    def query_params(self) -> Mapping[str, str]:
        return self.query

    @property
    def audio_out(self) -> CallSocket:
        return self

    def play(self, delta: spb.AudioDelta) -> None:
        """The answer's audio, on the call's track (`audio_out`)."""
        if delta.ref.response_id == self._cut_response:
            return
        if self._response_id and delta.ref.response_id != self._response_id:
            self._stopped()  # the last answer's response.done never came
        if not self._response_id:
            self._response_id = delta.ref.response_id
            self._response_open = True
            self._say("output_audio_buffer.started", response_id=self._response_id)
        self.speaker.play(delta.audio)
        self._queue(delta)

    async def send(self, kind: str, text: str) -> None:
        if kind == "output_audio_buffer.cleared":
            # The session's answer to the client's `output_audio_buffer.clear`.
            if self._response_id:
                self._cut()
            self._send_text(text)
            return
        if kind == "input_audio_buffer.speech_started" and self._response_id:
            self._say("output_audio_buffer.cleared", response_id=self._response_id)
            self._cut()
        self._send_text(text)
        if kind == "response.done" and _response_of(text) == self._response_id:
            self._response_open = False
            if not self.speaker.playing:
                self._stopped()

    # ------------------------------------------------------------ helpers
    def _queue(self, delta: spb.AudioDelta) -> None:
        item_id, seconds = delta.ref.item_id, len(delta.audio) / 2 / SESSION_RATE
        if not self._queued or self._queued[-1].item_id != item_id:
            self._queued.append(_Queued(item_id))
        queued = self._queued[-1]
        queued.seconds += seconds
        queued.session_ms = max(queued.session_ms, delta.audio_duration_ms)

    def _truncate_unheard(self, dropped_s: float) -> None:
        """The caller heard only what was played: each item cut short is
        truncated there, as a WebSocket client does from its own playback
        (the server knows what a call played; a socket's client must say).
        The last item is cut even if all it sent was played: its response
        was still speaking (its text may be ahead of its audio)."""
        played = sum(q.seconds for q in self._queued) - dropped_s
        last = len(self._queued) - 1
        for index, queued in enumerate(self._queued):
            heard = min(queued.seconds, max(0.0, played))
            played -= heard
            if queued.item_id and (heard < queued.seconds or index == last):
                self._from_client(
                    json.dumps(
                        {
                            "type": "conversation.item.truncate",
                            "item_id": queued.item_id,
                            "content_index": 0,
                            "audio_end_ms": queued.end_ms(heard),
                        }
                    )
                )
        self._queued.clear()

    def _cut(self) -> None:
        """The answer stops where the caller is: the rest is dropped unheard."""
        self._truncate_unheard(self.speaker.clear())
        self._cut_response, self._response_id = self._response_id, ""

    def _drained(self) -> None:
        if self._response_id and not self._response_open:
            self._stopped()

    def _stopped(self) -> None:
        self._queued.clear()
        self._say("output_audio_buffer.stopped", response_id=self._response_id)
        self._response_id = ""

    def _say(self, kind: str, **fields: Any) -> None:
        self._send_text(json.dumps({"type": kind, "event_id": new_id("event"), **fields}))

    def _send_text(self, text: str) -> None:
        self._watchers.send(text)
        self._to_channel(text)


@dataclass
class _Queued:
    """One item's audio given to the speaker: its seconds, and its length as
    the session counts it (a whole number of ms a delta, summed)."""

    item_id: str
    seconds: float = 0.0
    session_ms: int = 0

    def end_ms(self, heard_s: float) -> int:
        """`audio_end_ms` for `heard_s` of it: never past the audio the session
        holds, which its per-delta rounding leaves a few ms short of ours."""
        heard_ms = int(heard_s * 1000)
        return min(heard_ms, self.session_ms) if self.session_ms else heard_ms


def _response_of(text: str) -> str:
    """The id of the response a `response.done` event's text is about."""
    try:
        return str(json.loads(text)["response"]["id"])
    except (ValueError, KeyError, TypeError):
        return ""


def _without_formats(text: str) -> str:
    """A call's audio formats are the wire's (Opus), never the client's to set:
    a `session.update` loses its audio formats (other events pass as sent)."""
    try:
        event = json.loads(text)
    except ValueError:
        return text
    if not isinstance(event, dict) or event.get("type") != "session.update":
        return text
    session = event.get("session")
    if not isinstance(session, dict):
        return text
    for key in ("input_audio_format", "output_audio_format"):
        session.pop(key, None)
    audio = session.get("audio")
    if isinstance(audio, dict):
        for side in ("input", "output"):
            if isinstance(audio.get(side), dict):
                audio[side].pop("format", None)
    return json.dumps(event)
