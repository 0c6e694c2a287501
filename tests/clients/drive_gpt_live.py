"""The stock `openai` SDK's GPT-Live client against the stack, as an app uses it.

`AsyncOpenAI(base_url=...).live.connect()` opens `/v1/live/sessions` with its
Bearer key; `session.start` (24 kHz PCM), then the microphone: a 200 ms
`session.input_audio.append` every 200 ms (the spoken question, then live
silence) while every server frame is read through the SDK (`recv_bytes`,
`parse_event`) and judged strictly against its `openai.types.live` models;
then `session.close` and its `session.closed`. The JSON record holds every
frame as it came (audio included, to check the transcript spans against it)
and every frame a strict client would refuse.

Run by tests/e2e/test_live_sessions.py with .venv-clients/bin/python.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
import traceback
import typing
import wave
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI
from openai.types.live import ServerEvent
from openai.types.live.audio_format_param import AudioPCM
from pydantic import BaseModel, TypeAdapter, ValidationError

RATE = 24000
CHUNK = RATE // 5 * 2  # 200 ms of PCM16
UNION: TypeAdapter[Any] = TypeAdapter(ServerEvent)
MODELS: dict[str, type[BaseModel]] = {
    typing.get_args(m.model_fields["type"].annotation)[0]: m
    for m in typing.get_args(typing.get_args(ServerEvent)[0])
}


def refused(frame: dict[str, Any]) -> str | None:
    """Why a strict client refuses `frame`, or None."""
    model = MODELS.get(frame.get("type", ""))
    if model is None:
        return f"unknown type {frame.get('type')!r}"
    try:
        model.model_validate(frame, strict=True)
        UNION.validate_python(frame, strict=True)
    except ValidationError as exc:
        return str(exc)
    return None


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="the stack's http://host:port/v1")
    parser.add_argument("--wav", required=True)
    parser.add_argument("--silence-s", type=float, default=2.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with wave.open(args.wav, "rb") as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (RATE, 1, 2)
        pcm = w.readframes(w.getnframes())
    pcm += bytes(int(args.silence_s * RATE) * 2)
    pcm += bytes(-len(pcm) % CHUNK)
    record: dict[str, Any] = {"frames": [], "refused": [], "sent_ms": 0, "failure": None}
    client = AsyncOpenAI(
        api_key="sk-unused", base_url=args.url, websocket_base_url=args.url.replace("http", "ws")
    )
    try:
        async with client.live.connect() as conn:
            pcm_24k: AudioPCM = {"type": "audio/pcm", "rate": 24000}
            await conn.session.start(
                session={"model": "gpt-live-1", "audio": {"format": pcm_24k}},
                event_id="evt_start",
            )
            started = asyncio.Event()

            async def read() -> None:
                while True:
                    raw = await conn.recv_bytes()
                    event = conn.parse_event(raw)  # what the SDK makes of it
                    frame = json.loads(raw)
                    frame["received_s"] = time.monotonic()
                    record["frames"].append(frame)
                    started.set()
                    why = refused({k: v for k, v in frame.items() if k != "received_s"})
                    if why is not None:
                        record["refused"].append({"type": event.type, "why": why})
                    if event.type == "session.closed":
                        return

            reader = asyncio.create_task(read())
            await asyncio.wait_for(started.wait(), 30)
            for i in range(0, len(pcm), CHUNK):
                # A microphone: 200 ms of audio every 200 ms, on the wall clock.
                audio = base64.b64encode(pcm[i : i + CHUNK]).decode()
                await conn.session.input_audio.append(audio=audio)
                record["sent_ms"] += 200
                await asyncio.sleep(0.2)
            await conn.session.close(event_id="evt_close")
            await asyncio.wait_for(reader, 30)
    except Exception:
        record["failure"] = traceback.format_exc()
    finally:
        await client.close()
        await asyncio.to_thread(Path(args.out).write_text, json.dumps(record))


if __name__ == "__main__":
    asyncio.run(main())
