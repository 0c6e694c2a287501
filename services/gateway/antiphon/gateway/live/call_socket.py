"""A GPT-Live WebRTC session as a `ClientSocket` (connection.py).

The `POST /v1/live/sessions` that placed the call started the session: its
`session.start` is the first event read here (`start`). Then, as the
GPT-Live dialect would read a WebSocket's:

- the `oai-events` data channel's messages are the client's events;
- the microphone track is the input audio: each piece of it (`append_ms`,
  PCM16 mono at 24 kHz, call_audio.Microphone) is read as the
  `session.input_audio.append` a WebSocket client would send, so the same
  inbound half advances the timeline, mutes, and reflects it to sidebands;
- the output is the timeline's continuous track: its deltas (PCM16 24 kHz,
  the format the call's session is started with) play on the answer's
  track (call_audio.Speaker) and never cross the data channel; every other
  event does. The speaker starts its wall clock at its first frame, so a
  piece of the track that comes late leaves a short silence and the track
  plays that much later from then on: the latency grows to the worst
  jitter seen, as a playout buffer's would, and no further.

`started` resolves with the session id at `session.started`, or with the
error that came instead, for the POST to answer.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from typing import Any

from antiphon.gateway.calls.call_audio import SESSION_RATE, Speaker
from antiphon.gateway.calls.call_media import CallMedia
from antiphon.gateway.connection.client_socket import AudioOut
from antiphon.gateway.errors import ClientError

_DELTA = "session.output_audio.delta"
# The call's session format: what the microphone gives and the speaker takes.
CALL_FORMAT = {"type": "audio/pcm", "rate": SESSION_RATE}


class LiveCallSocket(CallMedia):
    """One GPT-Live WebRTC session: events on its data channel, audio on its tracks."""

    def __init__(self, media_timeout_s: float, *, append_ms: int = 100) -> None:
        super().__init__(media_timeout_s, Speaker(), append_ms=append_ms)
        self.started: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    # ------------------------------------------------ what the call gives
    def start(self, session: Mapping[str, Any]) -> None:
        """The POST's session config: the client's first event."""
        self._from_client(json.dumps({"type": "session.start", "session": dict(session)}))

    def _ended(self, why: str) -> None:
        if not self.started.done():
            self.started.set_exception(
                ClientError("session_unavailable", f"the call ended ({why})", type_="server_error")
            )

    def _heard(self, pcm16: bytes) -> None:
        audio = base64.b64encode(pcm16).decode()
        self._from_client(json.dumps({"type": "session.input_audio.append", "audio": audio}))

    # ------------------------------------------- ClientSocket, for Connection
    @property
    def query_params(self) -> Mapping[str, str]:
        return {}

    @property
    def audio_out(self) -> AudioOut | None:
        # The session's typed audio feeds the timeline (the dialect), whose
        # track comes back here as deltas (`send`).
        return None

    async def send(self, kind: str, text: str) -> None:
        if kind == _DELTA:
            self.speaker.play(base64.b64decode(json.loads(text)["delta"]), SESSION_RATE)
            return
        if not self.started.done():
            self._answer_start(kind, text)
        self._to_channel(text)

    def _answer_start(self, kind: str, text: str) -> None:
        """What answers the start: the session's id, or the error that came instead."""
        if kind == "session.started":
            self.started.set_result(json.loads(text)["session"]["id"])
        elif kind == "error":
            e = json.loads(text)["error"]
            error = ClientError(
                e["code"], e["message"], param=e.get("param") or "", type_=e["type"]
            )
            self.started.set_exception(error)
