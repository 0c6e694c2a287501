"""What the Agents SDK drivers share: the agent's realtime session on the stack,
a live microphone on it, and the SDK's errors and raw frames in the record.

Only the drivers import it (the clients venv has the Agents SDK, the stack's has not).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from agents.realtime import RealtimeAgent, RealtimeModelConfig, RealtimeRunner, RealtimeSession
from live import Microphone, Record


@asynccontextmanager
async def live_session(
    agent: RealtimeAgent[Any],
    url: str,
    record: Record,
    on_event: Callable[[Any], None],
    model: str | None = None,
) -> AsyncIterator[tuple[RealtimeSession, Microphone]]:
    """`RealtimeRunner(agent).run` with the SDK's stock model settings (only the
    URL, a dummy key and, if given, the `model` name are ours), every event of
    it seen by `on_event` after the record noted its errors and raw server
    frames, and a live microphone."""
    runner = RealtimeRunner(agent)
    config: RealtimeModelConfig = {"url": f"{url}/realtime", "api_key": "sk-unused"}
    if model is not None:
        config["initial_model_settings"] = {"model_name": model}
    session = await runner.run(model_config=config)
    async with session:
        consumer = asyncio.create_task(_consume(session, record, on_event))
        try:
            async with Microphone(lambda chunk: session.send_audio(chunk)) as mic:
                record.step("connected")
                await asyncio.sleep(0.6)  # the microphone is live before the user speaks
                yield session, mic
        finally:
            consumer.cancel()


async def _consume(
    session: RealtimeSession, record: Record, on_event: Callable[[Any], None]
) -> None:
    async for event in session:
        if event.type == "error":
            record.error("RealtimeError", event.error)
        elif event.type == "raw_model_event":
            data: Any = event.data
            if data.type == "raw_server_event":
                record.server_frame(data.data)
            elif data.type == "exception":
                record.error(f"exception ({data.context})", data.exception)
        on_event(event)
