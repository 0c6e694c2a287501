"""A live microphone on a session: one append every `chunk_ms`, on the wall clock.

Speech goes out at the pace it was spoken and silence fills every gap, as a
browser or a phone sends it; nothing is burst. This is what the server VAD
lanes are built for: the server alone decides when the user has finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Protocol

import websockets

from antiphon.client import audio
from antiphon.client.errors import SessionClosed


class AudioSink(Protocol):
    """Where a microphone's chunks go: a `DuplexClient`, or any raw client
    with the same two members."""

    @property
    def input_rate(self) -> int: ...

    async def append_audio(self, pcm16: bytes) -> None: ...


class Microphone:
    """`rate` is the session's input rate (by default, what the client says it is)."""

    def __init__(self, client: AudioSink, rate: int | None = None, chunk_ms: int = 200) -> None:
        self._client = client
        self._rate = rate or client.input_rate
        self._chunk_ms = chunk_ms
        self._queue: asyncio.Queue[tuple[bytes, asyncio.Future[float]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Microphone:
        self._task = asyncio.create_task(self._run(), name="antiphon-microphone")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            # Gone with the connection: nothing more to say.
            with contextlib.suppress(
                asyncio.CancelledError, SessionClosed, websockets.ConnectionClosed
            ):
                await self._task

    async def say(self, pcm16: bytes) -> float:
        """Speak `pcm16` (at the microphone's rate); returns the monotonic
        time its last chunk went out: the end of the user's speech."""
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        await self._queue.put((pcm16, done))
        return await done

    async def _run(self) -> None:
        size = audio.chunk_bytes(self._chunk_ms, self._rate)
        quiet = b"\x00" * size
        speech, done = b"", None
        tick = time.monotonic()
        while True:
            if not speech and not self._queue.empty():
                speech, done = self._queue.get_nowait()
            chunk, speech = speech[:size], speech[size:]
            # The last chunk of an utterance is padded with the silence after it.
            await self._client.append_audio(chunk + quiet[len(chunk) :])
            if done is not None and not speech:
                done.set_result(time.monotonic())
                done = None
            tick += self._chunk_ms / 1000
            await asyncio.sleep(max(0.0, tick - time.monotonic()))
