"""Pipecat's OpenAI Realtime service against the stack, in a pipeline as an app builds it.

`OpenAIRealtimeLLMService(api_key=..., base_url="ws://.../v1/realtime")` with
its stock session properties (the server's turn detection and defaults),
between the usual context aggregators; no transport: a source processor
plays the microphone (`InputAudioRawFrame`, 24 kHz) and a sink collects what
the bot says. Pipecat waits for `session.created` before it sends anything,
and parses every server frame strictly: a frame it cannot parse ends its
receive loop; an `error` frame is fatal to it.

1. The app starts the conversation (`LLMRunFrame`: the bot greets the user).
2. At the greeting's first audio the user asks the question over it: the
   server's turn detection cancels the greeting, Pipecat interrupts the
   pipeline (`InterruptionFrame`) and truncates what it had played.
3. The question is heard and answered with audio.

Run by tests/clients/test_pipecat.py with .venv-clients/bin/python.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
from collections.abc import Callable
from typing import Any

from live import RATE, Microphone, Record, parse_args, read_wav, run, wait_for
from loguru import logger
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMRunFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.realtime import events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner

ARGS = parse_args()
RECORD = Record("pipecat-ai", {name: importlib.metadata.version(name) for name in ("pipecat-ai",)})
# Pipecat logs (loguru) what it cannot handle; an error logged counts as surfaced.
logger.add(lambda m: RECORD.errors.append(f"logged: {m.record['message']}"[:1500]), level="ERROR")
GREETING = "Greet the user, then tell them a long story about a dragon who learns to sing."

# Every raw frame as Pipecat's receive loop parses it (an observation, not a change:
# the parser is Pipecat's own, called as before).
_parse: Callable[[str], Any] = events.parse_server_event


def _observed_parse(message: str) -> Any:
    RECORD.server_frame(json.loads(message))
    try:
        return _parse(message)
    except Exception as exc:
        RECORD.error("parse_server_event", str(exc).split("\n")[0])
        raise


events.parse_server_event = _observed_parse


class Source(FrameProcessor):
    """Where a transport's input would be: pushes the microphone's chunks."""

    async def speak(self, chunk: bytes) -> None:
        frame = InputAudioRawFrame(audio=chunk, sample_rate=RATE, num_channels=1)
        await self.push_frame(frame)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, ErrorFrame):
            RECORD.error("ErrorFrame (upstream)", frame.error)
        await self.push_frame(frame, direction)


class Transcripts(BaseObserver):
    """The user's transcripts as Pipecat passes them to its context aggregator."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, TranscriptionFrame) and data.first_push:
            self.texts.append(data.frame.text)


class Speaker(FrameProcessor):
    """Where a transport's output would be: counts the bot's audio and interruptions."""

    def __init__(self) -> None:
        super().__init__()
        self.audio_bytes = 0
        self.interruptions = 0

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TTSAudioRawFrame):
            self.audio_bytes += len(frame.audio)
        elif isinstance(frame, InterruptionFrame):
            self.interruptions += 1
        elif isinstance(frame, ErrorFrame):
            RECORD.error("ErrorFrame", frame.error)
        await self.push_frame(frame, direction)


async def scenario() -> None:
    question = read_wav(ARGS.question)
    llm = OpenAIRealtimeLLMService(api_key="sk-unused", base_url=f"{ARGS.url}/realtime")
    context = LLMContext([{"role": "system", "content": GREETING}])
    aggregators = LLMContextAggregatorPair(context)
    source, sink, transcripts = Source(), Speaker(), Transcripts()
    pipeline = Pipeline([source, aggregators.user(), llm, sink, aggregators.assistant()])
    worker = PipelineWorker(pipeline, observers=[transcripts])

    @worker.event_handler("on_pipeline_error")  # type: ignore[untyped-decorator]
    async def on_error(_: Any, frame: ErrorFrame) -> None:
        RECORD.error("on_pipeline_error", frame.error)

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    timeout = ARGS.timeout
    try:
        await wait_for(lambda: "session.updated" in RECORD.server_events, timeout, "session")
        RECORD.step("connected")
        async with Microphone(source.speak) as mic:
            await worker.queue_frames([LLMRunFrame()])
            await wait_for(lambda: RECORD.speaking(0), timeout, "audio of the greeting")
            RECORD.step("greeting.audio")
            await mic.say(question)
            RECORD.step("question.spoken")
            await wait_for(lambda: RECORD.answered(0), timeout, "the greeting's response.done")
            RECORD.step("greeting.done")
            greeting_bytes = sink.audio_bytes
            await wait_for(lambda: RECORD.answered(1), timeout, "the answer's response.done")
            RECORD.step("answer.done")
            # The answer's audio goes down the pipeline as a transport would play it.
            await wait_for(lambda: sink.audio_bytes > greeting_bytes, 10, "the answer's audio")
            RECORD.facts["answer_audio_bytes"] = sink.audio_bytes - greeting_bytes
    finally:
        RECORD.facts.update(
            audio_bytes=sink.audio_bytes,
            interruptions=sink.interruptions,
            pipecat_transcripts=transcripts.texts,
            receive_loop_alive=_receive_loop_alive(llm),
        )
        await worker.cancel()
        await asyncio.wait_for(running, 30)


def _receive_loop_alive(llm: OpenAIRealtimeLLMService) -> bool:
    """Pipecat ends its receive loop on a frame it cannot parse or on an error frame."""
    task = llm._receive_task
    return task is not None and not task.done()


run(RECORD, scenario, ARGS.out)
