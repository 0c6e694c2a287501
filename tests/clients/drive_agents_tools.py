"""The OpenAI Agents SDK's realtime agent with a `function_tool`, against the stack.

`RealtimeRunner(agent).run(model_config={"url": ..., "api_key": ...})` with
the SDK's stock model settings (semantic_vad, its voice, its transcription
model); the agent declares one tool, `get_weather`, which the SDK sends as
`session.tools`. Into a live microphone:

1. "What is the weather in Paris?": the model calls `get_weather`; the SDK
   runs the function (`tool_start` / `tool_end`), sends its result
   (`function_call_output`) and its own `response.create`; the result is
   answered aloud.
2. A question that needs no tool: answered aloud, with no call.

Run by tests/clients/test_agents_tools.py with .venv-clients/bin/python.
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import Any

from agents import function_tool
from agents.realtime import RealtimeAgent
from agents_live import live_session
from live import Record, parse_args, read_wav, run, wait_for

ARGS = parse_args()
RECORD = Record(
    "openai-agents",
    {name: importlib.metadata.version(name) for name in ("openai-agents", "openai")},
)
RECORD.capture_logs("openai.agents")
WEATHER = {"temperature_c": 18, "sky": "sunny"}


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: The city.
    """
    RECORD.facts.setdefault("function_ran_with", []).append(city)
    return json.dumps({"city": city, **WEATHER})


class Seen:
    """What the SDK itself reported, beside the raw frames."""

    def __init__(self) -> None:
        self.tool_starts: list[str] = []  # tool names, from its tool_start
        self.tool_ends: list[dict[str, Any]] = []  # name, arguments, output
        self.audio_bytes = 0
        # Response id -> the types of its output items (from the raw response.done).
        self.outputs: dict[str, list[str]] = {}


def note(seen: Seen, event: Any) -> None:
    """What the SDK reports besides errors and frames (agents_live notes those)."""
    if event.type == "audio":
        seen.audio_bytes += len(event.audio.data)
    elif event.type == "tool_start":
        seen.tool_starts.append(event.tool.name)
    elif event.type == "tool_end":
        seen.tool_ends.append(
            {"name": event.tool.name, "arguments": event.arguments, "output": event.output}
        )
    elif event.type == "raw_model_event" and event.data.type == "raw_server_event":
        frame = event.data.data
        if frame.get("type") == "response.done":
            response = frame.get("response") or {}
            seen.outputs[str(response.get("id"))] = [
                str(item.get("type")) for item in response.get("output") or []
            ]


def answered_after(n: int) -> bool:
    """Whether a response created after the `n`th has ended `completed` with audio."""
    return any(
        RECORD.responses[rid].status == "completed" and RECORD.responses[rid].audio_bytes > 0
        for rid in RECORD.created[n + 1 :]
    )


def answered_after_the_call(seen: Seen) -> bool:
    """Whether the response after the one that called was answered aloud."""
    calls = [rid for rid in RECORD.created if "function_call" in seen.outputs.get(rid, [])]
    return bool(calls) and answered_after(RECORD.created.index(calls[0]))


async def scenario() -> None:
    question, follow_up = read_wav(ARGS.question), read_wav(ARGS.follow_up)
    agent = RealtimeAgent(
        name="Assistant", instructions="You are a helpful voice assistant.", tools=[get_weather]
    )
    seen = Seen()
    timeout = ARGS.timeout
    try:
        async with live_session(agent, ARGS.url, RECORD, lambda e: note(seen, e)) as (_, mic):
            await mic.say(question)
            RECORD.step("turn1.spoken")
            await wait_for(lambda: bool(seen.tool_ends), timeout, "the SDK's tool_end")
            RECORD.step("turn1.tool_ran")
            await wait_for(lambda: answered_after_the_call(seen), timeout, "the spoken answer")
            RECORD.step("turn1.answered")

            before = len(RECORD.created) - 1
            await mic.say(follow_up)
            RECORD.step("turn2.spoken")
            await wait_for(lambda: answered_after(before), timeout, "the second answer")
            RECORD.step("turn2.answered")
            RECORD.facts["second_from"] = before + 1
    finally:
        RECORD.facts.update(
            {
                "tool_starts": seen.tool_starts,
                "tool_ends": seen.tool_ends,
                "audio_bytes": seen.audio_bytes,
                "outputs": seen.outputs,
            }
        )


run(RECORD, scenario, ARGS.out)
