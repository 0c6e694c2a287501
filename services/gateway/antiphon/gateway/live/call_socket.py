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
import contextlib
import json
from collections import deque
from collections.abc import Mapping
from typing import Any

from aiortc import RTCDataChannel
from aiortc.mediastreams import MediaStreamTrack

from antiphon.gateway.calls.call_audio import SESSION_RATE, Microphone, Speaker
from antiphon.gateway.connection.client_socket import AudioOut
from antiphon.gateway.connection.close_codes import CLOSE_NORMAL
from antiphon.gateway.errors import ClientError
from antiphon.v1 import session_pb2 as spb

# Client events a call may have waiting for its connection (the microphone
# comes in real time; a data channel that floods past this ends the call).
INBOX_LIMIT = 1024
# Events for a data channel not open yet (a client that never opens one
# reads none: its oldest are dropped past this).
UNSENT_LIMIT = 1024
_RECEIVE = "websocket.receive"
_DELTA = "session.output_audio.delta"
# The call's session format: what the microphone gives and the speaker takes.
CALL_FORMAT = {"type": "audio/pcm", "rate": SESSION_RATE}


class LiveCallSocket:
    """One GPT-Live WebRTC session: events on its data channel, audio on its tracks."""

    def __init__(self, media_timeout_s: float, *, append_ms: int = 100) -> None:
        self.media_timeout_s = media_timeout_s
        self.append_ms = append_ms
        self.speaker = Speaker()
        self.started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.ended_by = ""
        self._inbox: asyncio.Queue[Mapping[str, Any]] = asyncio.Queue()
        self._channel: RTCDataChannel | None = None
        self._unsent: deque[str] = deque(maxlen=UNSENT_LIMIT)
        self._listening: asyncio.Task[None] | None = None

    # ------------------------------------------------ what the call gives
    def start(self, session: Mapping[str, Any]) -> None:
        """The POST's session config: the client's first event."""
        self._from_client(json.dumps({"type": "session.start", "session": dict(session)}))

    def attach_channel(self, channel: RTCDataChannel) -> None:
        self._channel = channel
        channel.on("message", self._on_message)
        channel.on("close", lambda: self.end("channel_closed"))
        while self._unsent:
            channel.send(self._unsent.popleft())

    def attach_microphone(self, track: MediaStreamTrack) -> None:
        if self._listening is None:
            microphone = Microphone(track, append_ms=self.append_ms)
            self._listening = asyncio.create_task(self._listen(microphone))

    def end(self, why: str) -> None:
        """The call is over (hangup, media gone, peer closed): the connection
        reads a disconnect next."""
        if not self.ended_by:
            self.ended_by = why
            self._inbox.put_nowait({"type": "websocket.disconnect", "code": CLOSE_NORMAL})
            if not self.started.done():
                self.started.set_exception(
                    ClientError(
                        "session_unavailable", f"the call ended ({why})", type_="server_error"
                    )
                )

    def _on_message(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            message = message.decode(errors="replace")
        self._from_client(message)

    def _from_client(self, text: str) -> None:
        if self.ended_by:
            return
        if self._inbox.qsize() >= INBOX_LIMIT:
            self.end("flooded")
            return
        self._inbox.put_nowait({"type": _RECEIVE, "text": text})

    async def _listen(self, microphone: Microphone) -> None:
        try:
            async for pcm in microphone.appends(silent_after_s=self.media_timeout_s):
                audio = base64.b64encode(pcm).decode()
                self._from_client(
                    json.dumps({"type": "session.input_audio.append", "audio": audio})
                )
        except TimeoutError:
            self.end("media_timeout")
            return
        self.end("media_ended")

    # ------------------------------------------- ClientSocket, for Connection
    @property
    def query_params(self) -> Mapping[str, str]:
        return {}

    @property
    def audio_out(self) -> AudioOut | None:
        # The session's typed audio feeds the timeline (the dialect), whose
        # track comes back here as deltas (`send`).
        return None

    async def receive(self) -> Mapping[str, Any] | spb.ClientCommand:
        return await self._inbox.get()

    async def send(self, kind: str, text: str) -> None:
        if kind == _DELTA:
            self.speaker.play(base64.b64decode(json.loads(text)["delta"]), SESSION_RATE)
            return
        if not self.started.done():
            self._answer_start(kind, text)
        channel = self._channel
        if channel is None:
            self._unsent.append(text)
        elif channel.readyState == "open":
            channel.send(text)

    async def close(self, code: int, reason: str | None) -> None:
        self.end(reason or "closed")
        self.speaker.stop()
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening

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
