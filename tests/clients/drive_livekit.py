"""LiveKit Agents' OpenAI realtime model against the stack, without a room.

`livekit.plugins.openai.realtime.RealtimeModel(base_url="ws://.../v1")` with
its stock options (semantic_vad, its voice and transcription model), and the
`RealtimeSession` it makes, driven as `AgentSession` drives it: audio frames
by `push_audio`, replies by `generate_reply()` (which waits for a
`response.created` whose `metadata.client_event_id` echoes its request), an
interruption by `interrupt()` (`response.cancel`). Errors are what its event
emitter reports (`error`).

1. A question spoken into a live microphone: heard, answered (the server's
   turn detection creates the response).
2. `generate_reply()`: a reply the app asks for, answered with audio.
3. A user message added by `update_chat_ctx` (`conversation.item.create`),
   then `generate_reply()`, interrupted at its first audio by `interrupt()`:
   the response ends `cancelled`.

Run by tests/clients/test_livekit.py with .venv-clients/bin/python.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from typing import Any

from live import RATE, Microphone, Record, parse_args, read_wav, run, wait_for
from livekit import rtc
from livekit.agents import llm
from livekit.plugins.openai.realtime import RealtimeModel

ARGS = parse_args()
RECORD = Record(
    "livekit-agents",
    {
        name: importlib.metadata.version(name)
        for name in ("livekit-agents", "livekit-plugins-openai", "openai")
    },
)
RECORD.capture_logs("livekit.agents")
LONG_REQUEST = "Tell me a long story about a dragon who learns to sing."


class Generations:
    """What LiveKit delivered per generation (its view of each response)."""

    def __init__(self) -> None:
        self.audio_bytes: dict[str, int] = {}
        self.user_initiated: dict[str, bool] = {}
        self.transcripts: list[str] = []
        self.tasks: set[asyncio.Task[None]] = set()

    def created(self, ev: llm.GenerationCreatedEvent) -> None:
        rid = str(ev.response_id)
        self.audio_bytes.setdefault(rid, 0)
        self.user_initiated[rid] = ev.user_initiated
        task = asyncio.create_task(self._consume(rid, ev))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _consume(self, rid: str, ev: llm.GenerationCreatedEvent) -> None:
        async def audio(msg: llm.MessageGeneration) -> None:
            async for frame in msg.audio_stream:
                self.audio_bytes[rid] += len(frame.data.tobytes())

        async def text(msg: llm.MessageGeneration) -> None:
            async for _ in msg.text_stream:
                pass

        async for msg in ev.message_stream:
            await asyncio.gather(audio(msg), text(msg))


async def scenario() -> None:
    question = read_wav(ARGS.question)
    model = RealtimeModel(base_url=ARGS.url, api_key="sk-unused")
    session = model.session()
    gens = Generations()

    def on_error(ev: llm.RealtimeModelError) -> None:
        RECORD.error(f"error (recoverable={ev.recoverable})", getattr(ev.error, "body", ev.error))

    def on_transcript(ev: llm.InputTranscriptionCompleted) -> None:
        if ev.is_final:
            gens.transcripts.append(ev.transcript)

    def on_client_event(ev: dict[str, Any]) -> None:
        if ev.get("type") != "input_audio_buffer.append":  # the microphone's, every 100 ms
            RECORD.client_events.append(str(ev.get("type")))

    session.on("openai_server_event_received", RECORD.server_frame)
    session.on("openai_client_event_queued", on_client_event)
    session.on("error", on_error)
    session.on("generation_created", gens.created)
    session.on("input_audio_transcription_completed", on_transcript)

    def push(chunk: bytes) -> None:
        frame = rtc.AudioFrame(
            data=chunk, sample_rate=RATE, num_channels=1, samples_per_channel=len(chunk) // 2
        )
        session.push_audio(frame)

    timeout = ARGS.timeout
    try:
        async with Microphone(push) as mic:
            await wait_for(lambda: "session.updated" in RECORD.server_events, timeout, "session")
            RECORD.step("connected")
            await asyncio.sleep(0.6)  # the microphone is live before the user speaks
            await mic.say(question)
            RECORD.step("turn1.spoken")
            await wait_for(lambda: RECORD.answered(0), timeout, "response 1's response.done")
            RECORD.step("turn1.done")

            reply = await session.generate_reply()
            RECORD.step("turn2.generation_created")
            RECORD.response(str(reply.response_id)).notes.append("generate_reply")
            await wait_for(lambda: RECORD.answered(1), timeout, "response 2's response.done")
            RECORD.step("turn2.done")

            # A user message put into the chat context, as AgentSession does with typed
            # input (conversation.item.create), then a reply to it.
            chat_ctx = session.chat_ctx.copy()
            chat_ctx.add_message(role="user", content=LONG_REQUEST)
            await session.update_chat_ctx(chat_ctx)
            RECORD.step("turn3.chat_ctx_updated")
            reply = await session.generate_reply()
            RECORD.step("turn3.generation_created")
            RECORD.response(str(reply.response_id)).notes.append("generate_reply")
            await wait_for(lambda: RECORD.speaking(2), timeout, "audio of response 3")
            RECORD.step("turn3.audio")
            session.interrupt()
            RECORD.step("turn3.interrupted")
            await wait_for(lambda: RECORD.answered(2), timeout, "response 3's response.done")
            RECORD.step("turn3.done")
            await asyncio.sleep(0.5)  # LiveKit's own streams settle
    finally:
        RECORD.facts.update(
            audio_bytes=gens.audio_bytes,
            user_initiated=gens.user_initiated,
            livekit_transcripts=gens.transcripts,
        )
        await session.aclose()
        await model.aclose()


run(RECORD, scenario, ARGS.out)
