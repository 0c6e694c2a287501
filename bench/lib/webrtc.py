"""A WebRTC caller without a browser: aiortc, as a Python user would call
`POST /v1/realtime/calls`. Its microphone is a live track (what `say` was
given, then silence, in 20 ms frames on the wall clock); what it hears is
kept with each frame's arrival time; the `oai-events` channel's events are
kept in order."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from antiphon.gateway.calls.call_audio import Speaker

Event = dict[str, Any]


@dataclass
class Heard:
    """The call's audio as it arrived: PCM16 mono 48 kHz frames, each with
    its arrival time."""

    frames: list[tuple[float, np.ndarray]] = field(default_factory=list)

    def rms_between(self, start: float, end: float) -> float:
        parts = [f for t, f in self.frames if start <= t < end]
        if not parts:
            return 0.0
        samples = np.concatenate(parts).astype(np.float64)
        return float(np.sqrt(np.mean(samples**2)))

    def loud_after(self, start: float, rms: float = 300.0, window_s: float = 0.2) -> float | None:
        """When the first `window_s` louder than `rms` began after `start`."""
        times = [t for t, _ in self.frames if t >= start]
        for t in times:
            if self.rms_between(t, t + window_s) > rms:
                return t
        return None


class Caller:
    def __init__(self, peer: RTCPeerConnection, microphone: Speaker) -> None:
        self.peer = peer
        self.microphone = microphone
        self.events: list[Event] = []
        self.heard = Heard()
        self.call_id = ""
        self._arrived = asyncio.Event()
        self.channel = peer.createDataChannel("oai-events")
        self.channel.on("message", self._on_message)
        self._listening: asyncio.Task[None] | None = None
        self.opened = asyncio.Event()
        self.channel.on("open", self.opened.set)
        self._channel_closed = asyncio.Event()
        self.channel.on("close", self._channel_closed.set)

        @peer.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            self._listening = asyncio.create_task(self._listen(track))

    @classmethod
    async def dial(
        cls,
        base_url: str,
        *,
        bearer: str = "",
        session: dict[str, Any] | None = None,
        timeout: float = 30.0,
        candidates: bool = True,
        query: str = "",
    ) -> Caller:
        """A call to the gateway at `base_url` (http://host:port), answered;
        with `session`, the offer goes as OpenAI's multipart form. Without
        `candidates` the offer holds none of the caller's addresses, as a
        browser's offer posted before it gathered any (the Agents SDK's): the
        gateway must learn them from the caller's connectivity checks."""
        peer = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        microphone = Speaker()
        peer.addTrack(microphone)
        caller = cls(peer, microphone)
        await peer.setLocalDescription(await peer.createOffer())
        offer = peer.localDescription.sdp
        if not candidates:
            offer = "".join(
                line
                for line in offer.splitlines(keepends=True)
                if not line.startswith(("a=candidate", "a=end-of-candidates"))
            )
        headers = {"authorization": f"Bearer {bearer}"} if bearer else {}
        async with httpx.AsyncClient(timeout=timeout) as http:
            if session is None:
                reply = await http.post(
                    f"{base_url}/v1/realtime/calls{query}",
                    content=offer,
                    headers={**headers, "content-type": "application/sdp"},
                )
            else:
                form = {"sdp": offer, "session": json.dumps(session)}
                reply = await http.post(
                    f"{base_url}/v1/realtime/calls{query}",
                    files={k: (None, v) for k, v in form.items()},
                    headers=headers,
                )
        if reply.status_code != 201:
            await peer.close()
            raise CallRefused(reply.status_code, reply.json())
        caller.call_id = reply.headers["location"].rsplit("/", 1)[-1]
        await peer.setRemoteDescription(RTCSessionDescription(reply.text, "answer"))
        await asyncio.wait_for(caller.opened.wait(), timeout)
        return caller

    def say(self, pcm16: bytes, rate: int) -> float:
        """Speak into the call from now on; the seconds it lasts."""
        self.microphone.play(pcm16, rate)
        return len(pcm16) / 2 / rate

    def send(self, event: Event) -> None:
        self.channel.send(json.dumps(event))

    async def wait_for(self, kind: str, *, after: int = 0, timeout: float = 60.0) -> Event:
        """The first event of `kind` at index `after` or later."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events[after:]:
                if event["type"] == kind:
                    return event
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {kind} in {[e['type'] for e in self.events]}")
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)

    async def answer_played(self, *, timeout: float = 30.0) -> Event:
        """Ask for an answer (`response.create`) and wait until it has played
        out; its `output_audio_buffer.started` event."""
        self.send({"type": "response.create"})
        started = await self.wait_for("output_audio_buffer.started", timeout=timeout)
        await self.wait_for("output_audio_buffer.stopped", timeout=timeout)
        return started

    async def ended_by_server(self, timeout: float = 10.0) -> bool:
        """Whether the gateway ended the call within `timeout`: the data
        channel closes under the caller."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._channel_closed.wait(), timeout)
        return self._channel_closed.is_set()

    def of_type(self, kind: str) -> list[Event]:
        return [e for e in self.events if e["type"] == kind]

    async def hang_up(self) -> None:
        self.microphone.stop()
        if self._listening is not None:
            self._listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listening
        await self.peer.close()

    def _on_message(self, message: str | bytes) -> None:
        event = json.loads(message)
        event["_at"] = time.monotonic()
        self.events.append(event)
        self._arrived.set()

    async def _listen(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            pcm = frame.to_ndarray()  # type: ignore[union-attr]
            mono = pcm.reshape(-1, frame.layout.nb_channels)[:, 0]  # type: ignore[union-attr]
            self.heard.frames.append((time.monotonic(), mono.astype(np.int16)))


class CallRefused(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body
