"""What every call's `ClientSocket` does with the call: its data channel and
its microphone in, its channel out, and its end.

To `Connection` a call looks like a WebSocket: `receive` gives the caller's
data channel messages and its microphone's pieces (call_audio.Microphone),
each as the dialect reads it (`_admit`, `_heard`); events go out on the
channel (`_to_channel`), held until the channel opens. A data channel that
floods past `INBOX_LIMIT` ends the call, as a WebSocket's reader would stop
reading; so does a microphone silent for `media_timeout_s`. The Realtime
call (call_socket.py) and the GPT-Live call (live/call_socket.py) differ in
how they read those and what they play.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping
from typing import Any

from aiortc import RTCDataChannel
from aiortc.mediastreams import MediaStreamTrack

from antiphon.gateway.calls.call_audio import Microphone, Speaker
from antiphon.gateway.connection.close_codes import CLOSE_NORMAL
from antiphon.v1 import session_pb2 as spb

# Client events a call may have waiting for its session stream (the
# caller's appends come in real time).
INBOX_LIMIT = 1024
# Events for a data channel not open yet (a client that never opens one
# reads none: its oldest are dropped past this).
UNSENT_LIMIT = 1024
RECEIVE = "websocket.receive"


class CallMedia:
    def __init__(self, media_timeout_s: float, speaker: Speaker, *, append_ms: int = 100) -> None:
        self.media_timeout_s = media_timeout_s
        self.append_ms = append_ms
        self.speaker = speaker
        self.ended_by = ""
        self._inbox: asyncio.Queue[Mapping[str, Any] | spb.ClientCommand] = asyncio.Queue()
        self._channel: RTCDataChannel | None = None
        self._unsent: deque[str] = deque(maxlen=UNSENT_LIMIT)
        self._listening: asyncio.Task[None] | None = None

    # ------------------------------------------------ what the call gives
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
            self._ended(why)

    # ---------------------------------------------------- for subclasses
    def _admit(self, text: str) -> str:
        """A data channel message as the dialect is to read it."""
        return text

    def _heard(self, pcm16: bytes) -> None:
        """A piece of the microphone (PCM16 mono at the session's rate)."""
        raise NotImplementedError

    def _ended(self, why: str) -> None:
        """What else ends with the call."""

    # ------------------------------------------- ClientSocket, for Connection
    async def receive(self) -> Mapping[str, Any] | spb.ClientCommand:
        return await self._inbox.get()

    async def close(self, code: int, reason: str | None) -> None:
        self.end(reason or "closed")
        self.speaker.stop()
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening

    # ------------------------------------------------------------ helpers
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
        self._inbox.put_nowait({"type": RECEIVE, "text": self._admit(text)})

    def _to_inbox(self, command: spb.ClientCommand) -> None:
        self._inbox.put_nowait(command)

    async def _listen(self, microphone: Microphone) -> None:
        try:
            async for pcm in microphone.appends(silent_after_s=self.media_timeout_s):
                self._heard(pcm)
        except TimeoutError:
            self.end("media_timeout")
            return
        self.end("media_ended")

    def _to_channel(self, text: str) -> None:
        channel = self._channel
        if channel is None:
            self._unsent.append(text)  # the client's channel is not open yet
        elif channel.readyState == "open":
            channel.send(text)
