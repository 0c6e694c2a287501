"""`antiphon talk` with a microphone and a speaker, through PortAudio (`sounddevice`).

Imported only when a conversation uses the machine's sound devices, so the
rest of the client needs no sound library. The microphone streams without
pause (server VAD ends each turn, and speaking over an answer interrupts
it); each answer plays as its audio arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, TextIO

from antiphon.client.duplex import DuplexClient
from antiphon.client.errors import ClientError
from antiphon.client.events import Event, InputTranscript

NO_DEVICES = "use `antiphon talk --in question.wav --out reply.wav` where there are none"


def _sounddevice() -> Any:
    try:
        import sounddevice
    except (ImportError, OSError) as exc:
        raise ClientError(
            f"no sound library ({exc}): pip install 'antiphon-client[audio]' "
            f"(it needs PortAudio), or {NO_DEVICES}"
        ) from exc
    try:
        sounddevice.query_devices(kind="input")
        sounddevice.query_devices(kind="output")
    except Exception as exc:
        raise ClientError(f"no microphone or speaker here ({exc}): {NO_DEVICES}") from exc
    return sounddevice


async def converse(client: DuplexClient, out: TextIO) -> int:
    sd = _sounddevice()
    loop = asyncio.get_running_loop()
    heard: asyncio.Queue[bytes] = asyncio.Queue(maxsize=50)

    def on_input(data: Any, frames: int, when: Any, status: Any) -> None:
        loop.call_soon_threadsafe(_offer, heard, bytes(data))

    def show(event: Event) -> None:
        if isinstance(event, InputTranscript):
            out.write(f"you: {event.transcript}\n")

    async with client:
        client.add_listener(show)
        rate = client.input_rate
        with (
            sd.RawInputStream(
                samplerate=rate, channels=1, dtype="int16", blocksize=rate // 10, callback=on_input
            ),
            sd.RawOutputStream(samplerate=client.output_rate, channels=1, dtype="int16") as speaker,
        ):
            out.write("Listening (Ctrl-C to stop).\n")
            sender = asyncio.create_task(_send(client, heard))
            try:
                async for response in client.responses():
                    async for chunk in response.chunks():
                        await asyncio.to_thread(speaker.write, chunk)
                    out.write(f"assistant: {response.transcript or response.text}\n")
            finally:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
    return 0


def _offer(queue: asyncio.Queue[bytes], block: bytes) -> None:
    """A microphone block for the sender; the oldest goes if the network is behind."""
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(block)


async def _send(client: DuplexClient, heard: asyncio.Queue[bytes]) -> None:
    while True:
        await client.append_audio(await heard.get())
