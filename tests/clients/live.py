"""What every client driver shares: a live microphone, the run's record, its JSON.

Stdlib only: the drivers run in the clients venv (`.venv-clients`), which
has none of the project's packages, and import this file from beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import logging
import sys
import time
import traceback
import wave
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RATE = 24000  # OpenAI's PCM16 rate; every library here sends it
CHUNK_MS = 200


def read_wav(path: str) -> bytes:
    """PCM16 mono 24 kHz frames of a WAV written by the test."""
    with wave.open(path) as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (RATE, 1, 2):
            raise ValueError(f"{path}: want PCM16 mono {RATE} Hz")
        return bytes(w.readframes(w.getnframes()))


class Microphone:
    """A live microphone: one `CHUNK_MS` chunk every `CHUNK_MS` on the wall clock.

    Silence flows whenever nobody speaks, as a browser or phone sends it;
    `say` queues speech and returns when its last chunk has been handed to
    the library (the end of the user's speech on the client clock).
    """

    def __init__(self, send: Callable[[bytes], Awaitable[None] | None]) -> None:
        self._send = send
        self._chunk = RATE * CHUNK_MS // 1000 * 2
        self._queue: asyncio.Queue[tuple[bytes, asyncio.Future[float]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Microphone:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def say(self, pcm16: bytes) -> float:
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        await self._queue.put((pcm16, done))
        return await done

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        silence = b"\x00" * self._chunk
        speech, done = b"", None
        tick = loop.time()
        while True:
            if not speech and not self._queue.empty():
                speech, done = self._queue.get_nowait()
            chunk, speech = speech[: self._chunk], speech[self._chunk :]
            chunk += silence[len(chunk) :]
            sent = self._send(chunk)
            if sent is not None:
                await sent
            if done is not None and not speech:
                done.set_result(loop.time())
                done = None
            tick += CHUNK_MS / 1000
            await asyncio.sleep(max(0.0, tick - loop.time()))


@dataclass
class Response:
    id: str
    status: str = ""
    reason: str | None = None
    audio_bytes: int = 0
    transcript: str = ""
    # How the library learned of it (e.g. LiveKit's generate_reply future).
    notes: list[str] = field(default_factory=list)


@dataclass
class Record:
    """What a driver saw, written as JSON for the test to judge."""

    library: str
    versions: dict[str, str] = field(default_factory=dict)
    # Errors the library surfaced to its user (error events, exceptions, error frames).
    errors: list[str] = field(default_factory=list)
    # Every server frame's type, in order, as the library received it.
    server_events: list[str] = field(default_factory=list)
    # Client frames the library sent, by type (where the library exposes them).
    client_events: list[str] = field(default_factory=list)
    user_transcripts: list[str] = field(default_factory=list)
    responses: dict[str, Response] = field(default_factory=dict)
    # Response ids in the order of their `response.created` frames.
    created: list[str] = field(default_factory=list)
    # Steps the driver reached, in order ("turn1.answered", ...), with seconds since start.
    steps: list[tuple[str, float]] = field(default_factory=list)
    # Library-specific observations (e.g. how many interruptions it reported).
    facts: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None
    _t0: float = field(default_factory=time.monotonic)

    def step(self, name: str) -> None:
        self.steps.append((name, round(time.monotonic() - self._t0, 2)))
        print(f"[driver] {name} at {self.steps[-1][1]}s", file=sys.stderr, flush=True)

    def response(self, response_id: str) -> Response:
        return self.responses.setdefault(response_id, Response(response_id))

    def server_frame(self, frame: dict[str, Any]) -> None:
        """Note a raw server frame (the protocol truth beside what the library reports)."""
        kind = str(frame.get("type"))
        self.server_events.append(kind)
        if kind == "error":
            self.errors.append(f"error frame: {json.dumps(frame.get('error'))}")
        elif kind == "response.created":
            response_id = str((frame.get("response") or {}).get("id"))
            self.response(response_id)
            self.created.append(response_id)
        elif kind == "response.output_audio.delta" and frame.get("response_id"):
            audio = base64.b64decode(frame.get("delta", ""))
            self.response(frame["response_id"]).audio_bytes += len(audio)
        elif kind == "response.output_audio_transcript.delta" and frame.get("response_id"):
            self.response(frame["response_id"]).transcript += frame.get("delta", "")
        elif kind == "response.done":
            r = frame.get("response") or {}
            resp = self.response(str(r.get("id")))
            resp.status = str(r.get("status"))
            resp.reason = (r.get("status_details") or {}).get("reason")
        elif kind == "conversation.item.input_audio_transcription.completed":
            self.user_transcripts.append(str(frame.get("transcript")))

    def nth(self, n: int) -> Response | None:
        """The `n`th response the server created (0-based), if it exists yet."""
        return self.responses[self.created[n]] if len(self.created) > n else None

    def answered(self, n: int) -> bool:
        """Whether the `n`th response has ended (its `response.done` arrived)."""
        r = self.nth(n)
        return r is not None and bool(r.status)

    def completed_after(self, n: int) -> bool:
        """Whether a response created after the `n`th has ended `completed`."""
        return any(self.responses[rid].status == "completed" for rid in self.created[n + 1 :])

    def speaking(self, n: int) -> bool:
        """Whether audio of the `n`th response has arrived."""
        r = self.nth(n)
        return r is not None and r.audio_bytes > 0

    def error(self, what: str, exc: object) -> None:
        """An error the library surfaced; a pydantic error as its lines, not its repr."""
        errors = getattr(exc, "errors", None)
        if callable(errors):
            try:
                detail = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (input {e.get('input')!r})"
                    for e in errors()
                )
            except Exception:
                detail = repr(exc)
        else:
            detail = repr(exc)
        self.errors.append(f"{what}: {detail}"[:1500])

    def capture_logs(self, logger_name: str) -> None:
        """Errors the library only logs (a handler that failed on a frame) count too."""
        record = self

        class Errors(logging.Handler):
            def emit(self, log: logging.LogRecord) -> None:
                record.errors.append(f"logged by {log.name}: {log.getMessage()}"[:1500])

        logging.getLogger(logger_name).addHandler(Errors(logging.ERROR))

    def dump(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("_t0")
        return out


def parse_args(
    driver_options: Callable[[argparse.ArgumentParser], None] | None = None,
) -> argparse.Namespace:
    """The arguments every driver takes, and a driver's own (`driver_options`)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True, help="OpenAI base URL (ws://host:port/v1)")
    parser.add_argument("--question", required=True, help="WAV: the spoken question")
    parser.add_argument("--interruption", help="WAV: speech over a reply (where a driver has one)")
    parser.add_argument("--follow-up", help="WAV: a later question (where a driver has one)")
    parser.add_argument("--out", required=True, help="where the JSON record goes")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per step")
    if driver_options is not None:
        driver_options(parser)
    return parser.parse_args()


def run(record: Record, main: Callable[[], Coroutine[Any, Any, None]], out: str) -> None:
    """Run a driver's scenario; whatever happens, write the record."""
    try:
        asyncio.run(main())
    except BaseException as exc:
        record.failure = "".join(traceback.format_exception(exc))[-4000:]
        if not isinstance(exc, Exception):
            raise
    finally:
        Path(out).write_text(json.dumps(record.dump(), indent=1))


async def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, poll_s: float = 0.05
) -> None:
    """Poll `predicate` until it holds; a TimeoutError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(poll_s)
