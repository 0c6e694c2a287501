"""A live microphone on a session: one append every `chunk_ms`, on the wall clock.

Speech goes out at the pace it was spoken and silence fills every gap, as a
browser or a phone sends it; nothing is burst. This is what the server VAD
lanes are built for: the server alone decides when the user has finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from antiphon.client import audio
from antiphon.client.duplex import DuplexClient
from antiphon.client.errors import SessionClosed


class Microphone:
    def __init__(self, client: DuplexClient, chunk_ms: int = 200) -> None:
        self._client = client
        self._chunk_ms = chunk_ms
        self._queue: asyncio.Queue[tuple[bytes, asyncio.Future[float]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Microphone:
        self._task = asyncio.create_task(self._run(), name="antiphon-microphone")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, SessionClosed):
                await self._task

    async def say(self, pcm16: bytes) -> float:
        """Speak `pcm16` (at the session's input rate); returns the monotonic
        time its last chunk went out: the end of the user's speech."""
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        await self._queue.put((pcm16, done))
        return await done

    async def _run(self) -> None:
        size = audio.chunk_bytes(self._chunk_ms, self._client.input_rate)
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
