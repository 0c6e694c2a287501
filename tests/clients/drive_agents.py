"""The OpenAI Agents SDK's realtime session against the stack, as an app uses it.

`RealtimeRunner(agent).run(model_config={"url": ..., "api_key": ...})` with the
SDK's stock model settings (semantic_vad, its voice, its transcription model)
over its own `OpenAIRealtimeWebSocketModel`, which validates every server
frame with the `openai` SDK's types and reports a failing one as an error.

1. A question spoken into a live microphone: heard, answered with audio.
2. A second turn by text (`send_message`: item + the SDK's own
   `response.create`), interrupted at its first audio by the SDK's interrupt
   (`conversation.item.truncate`, then `response.cancel`): the response ends
   `cancelled`. `session.interrupt()` sends that cancel only when the
   session's turn detection does not cancel on speech by itself
   (`interrupt_response`, on by default), so an app's stop button asks for it:
   `RealtimeModelSendInterrupt(force_response_cancel=True)`.
3. Another text turn, which the user talks over: the server's turn detection
   cancels the reply (`turn_detected`), the SDK stops its audio
   (`audio_interrupted`), and what the user said is answered.

Run by tests/clients/test_agents_sdk.py with .venv-clients/bin/python.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from agents.realtime import RealtimeAgent, RealtimeModelSendInterrupt
from agents_live import live_session
from live import Record, parse_args, read_wav, run, wait_for

ARGS = parse_args()
RECORD = Record(
    "openai-agents",
    {name: importlib.metadata.version(name) for name in ("openai-agents", "openai")},
)
RECORD.capture_logs("openai.agents")
LONG_REQUEST = "Tell me a long story about a dragon who learns to sing."


class Seen:
    """What the SDK itself reported, beside the raw frames."""

    def __init__(self) -> None:
        self.turns_started: list[str] = []  # response ids, from its turn_started
        self.turns_ended: list[str] = []
        self.audio_interrupted = 0  # its audio_interrupted events (it stops playback)
        self.audio_interrupted_by_speech = 0  # of those, after the user spoke over a reply
        self.audio_bytes = 0  # audio it handed to the app


def note(seen: Seen, event: Any) -> None:
    """What the SDK reports besides errors and frames (agents_live notes those)."""
    if event.type == "audio":
        seen.audio_bytes += len(event.audio.data)
    elif event.type == "audio_interrupted":
        seen.audio_interrupted += 1
    elif event.type == "raw_model_event":
        data: Any = event.data
        if data.type == "turn_started":
            seen.turns_started.append(str(data.response_id))
        elif data.type == "turn_ended":
            seen.turns_ended.append(str(data.response_id))


async def scenario() -> None:
    question, interruption = read_wav(ARGS.question), read_wav(ARGS.interruption)
    agent = RealtimeAgent(name="Assistant", instructions="You are a helpful voice assistant.")
    seen = Seen()
    timeout = ARGS.timeout
    try:
        async with live_session(agent, ARGS.url, RECORD, lambda e: note(seen, e)) as (
            session,
            mic,
        ):
            await mic.say(question)
            RECORD.step("turn1.spoken")
            await wait_for(lambda: RECORD.answered(0), timeout, "response 1's response.done")
            RECORD.step("turn1.done")

            await session.send_message(LONG_REQUEST)
            await wait_for(lambda: RECORD.speaking(1), timeout, "audio of response 2")
            RECORD.step("turn2.audio")
            await session.model.send_event(RealtimeModelSendInterrupt(force_response_cancel=True))
            RECORD.step("turn2.interrupted")
            await wait_for(lambda: RECORD.answered(1), timeout, "response 2's response.done")
            RECORD.step("turn2.done")

            await session.send_message(LONG_REQUEST)
            await wait_for(lambda: RECORD.speaking(2), timeout, "audio of response 3")
            RECORD.step("turn3.audio")
            before = seen.audio_interrupted
            await mic.say(interruption)
            RECORD.step("turn3.barged_in")
            await wait_for(lambda: RECORD.answered(2), timeout, "response 3's response.done")
            RECORD.step("turn3.done")
            seen.audio_interrupted_by_speech = seen.audio_interrupted - before
            # What the user said over the reply is a turn of its own: it is answered.
            await wait_for(lambda: RECORD.completed_after(2), timeout, "an answer to it")
            RECORD.step("turn4.done")
    finally:
        RECORD.facts.update(vars(seen))


run(RECORD, scenario, ARGS.out)
