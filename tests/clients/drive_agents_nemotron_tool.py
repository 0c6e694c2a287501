"""The OpenAI Agents SDK's realtime agent calls a tool through a duplex model.

`RealtimeRunner(agent).run` with the SDK's stock model settings and the model
`--model` (only the URL, a dummy key and that name are ours); the agent
declares one `function_tool`, `get_weather`. The user asks about the weather
into a live microphone; a random model decides nothing, so the app puts the
call into the model's own function channel: a `system` message whose text is
the call (`--call`), sent through the SDK's own raw client events
(`session.model.send_event(RealtimeModelSendRawMessage(...))`). The model
says that call back as OpenAI's function-call events; the SDK runs
`get_weather` itself (`tool_start` / `tool_end`) and sends its result
(`function_call_output`, then its own `response.create`), which the server
acknowledges (`conversation.item.added` / `.done` for that item) and answers
(`response.created`: a response that takes the model's next speech, which
this model, random and quiet, never gives; docs/duplex-models.md). Speech is
not judged.

Run by tests/e2e/test_nemotron_model.py with .venv-clients/bin/python.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from typing import Any

from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeModelSendRawMessage
from agents_live import live_session
from live import Record, parse_args, read_wav, run, wait_for


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="the model name the session asks for")
    parser.add_argument("--call", required=True, help="the system message's text: the call")


ARGS = parse_args(options)
RECORD = Record(
    "openai-agents",
    {name: importlib.metadata.version(name) for name in ("openai-agents", "openai")},
)
RECORD.capture_logs("openai.agents")
WEATHER = {"temperature_c": 18, "sky": "sunny"}
# The server's frames that acknowledge a client's item.
ACKS = ("conversation.item.added", "conversation.item.done")


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
        # call_id of each function_call the server's response.done carried.
        self.calls: list[str] = []
        # Ack frame type -> the call_ids of the function_call_output items it carried.
        self.outputs_acked: dict[str, list[str]] = {kind: [] for kind in ACKS}

    def acknowledged(self) -> bool:
        """Whether the server has acknowledged an output for a call it made."""
        return any(c in self.outputs_acked["conversation.item.done"] for c in self.calls)


def note(seen: Seen, event: Any) -> None:
    """What the SDK reports besides errors and frames (agents_live notes those)."""
    if event.type == "tool_start":
        seen.tool_starts.append(event.tool.name)
    elif event.type == "tool_end":
        seen.tool_ends.append(
            {"name": event.tool.name, "arguments": event.arguments, "output": event.output}
        )
    elif event.type == "raw_model_event" and event.data.type == "raw_server_event":
        frame = event.data.data
        kind = frame.get("type")
        item = frame.get("item") or {}
        if kind in ACKS and item.get("type") == "function_call_output":
            seen.outputs_acked[kind].append(str(item.get("call_id")))
        elif kind == "response.done":
            for out in (frame.get("response") or {}).get("output") or []:
                if out.get("type") == "function_call":
                    seen.calls.append(str(out.get("call_id")))


async def scenario() -> None:
    question = read_wav(ARGS.question)
    agent = RealtimeAgent(
        name="Assistant", instructions="You are a helpful voice assistant.", tools=[get_weather]
    )
    seen = Seen()
    forced_call = RealtimeModelSendRawMessage(
        message={
            "type": "conversation.item.create",
            "other_data": {
                "item": {
                    "type": "message",
                    "role": "system",
                    "content": [{"type": "input_text", "text": ARGS.call}],
                }
            },
        }
    )
    try:
        async with live_session(
            agent, ARGS.url, RECORD, lambda e: note(seen, e), model=ARGS.model
        ) as (session, mic):
            await mic.say(question)
            RECORD.step("spoken")
            await session.model.send_event(forced_call)
            RECORD.step("call_forced")
            await wait_for(lambda: bool(seen.tool_ends), ARGS.timeout, "the SDK's tool_end")
            RECORD.step("tool_ran")
            await wait_for(seen.acknowledged, ARGS.timeout, "the server's ack of the output")
            RECORD.step("output_acknowledged")
            # The SDK's own `response.create` after the output: accepted (a
            # response that takes the model's next speech) or refused (an error).
            await wait_for(
                lambda: len(RECORD.created) > 1 or bool(RECORD.errors),
                ARGS.timeout,
                "an answer to the SDK's response.create",
            )
            RECORD.step("response_requested")
    finally:
        RECORD.facts.update(
            {
                "tool_starts": seen.tool_starts,
                "tool_ends": seen.tool_ends,
                "calls": seen.calls,
                "outputs_acked": seen.outputs_acked,
            }
        )


run(RECORD, scenario, ARGS.out)
