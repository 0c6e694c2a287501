"""LiveKit Agents' GPT-Live model in an `AgentSession`, against the stack, without a room.

`livekit.plugins.openai.realtime.GPTLiveModel(base_url="http://.../v1",
delegation=...)` with its stock settings otherwise (its voice, its 100 ms
appends, its output gate), given to `AgentSession(llm=...)` as LiveKit runs
a duplex model: wrapped in its `DuplexRealtimeAdapter`, no VAD, no turn
detector, the model decides when it speaks. The session's audio input and
output are ours instead of a room's: a live microphone (200 ms every 200 ms:
the question, then live silence) and a sink that keeps every frame the agent
plays (it reports playout as a speaker does, in real time). Then
`AgentSession.aclose()`, which sends `session.close` and waits for
`session.closed`.

`--delegation client`: `Agent(instructions=...)` with no tools (a client
delegation has no tool channel). `--delegation responses` (the model's
default): the agent has a tool, which `session.start` carries, and one more
is added once the session runs (`Agent.update_tools`: `session.update`).

The record holds the raw server frames by type, the output track's deltas
(as the plugin received them), each played segment, the agent's states and
every error the framework surfaced (error events, the close event's error,
error logs).

Run by tests/clients/test_livekit_live.py with .venv-clients/bin/python.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.metadata
import time
from typing import Any

from live import RATE, Microphone, Record, parse_args, read_wav, run, wait_for
from livekit import rtc
from livekit.agents import Agent, AgentSession, function_tool
from livekit.agents.voice import io
from livekit.agents.voice.events import AgentStateChangedEvent, CloseEvent, ErrorEvent
from livekit.plugins.openai.realtime import GPTLiveModel, GPTLiveSession

ARGS = parse_args(
    lambda p: p.add_argument("--delegation", choices=("client", "responses"), required=True)
)
RECORD = Record(
    "livekit-agents-gpt-live",
    {name: importlib.metadata.version(name) for name in ("livekit-agents", "openai")},
)
RECORD.capture_logs("livekit.agents")
SILENCE_S = 4.0
INSTRUCTIONS = "You are a friendly voice assistant. Keep your answers short."


class MicInput(io.AudioInput):
    """A microphone as the session's audio input: frames as `Microphone` sends them."""

    def __init__(self) -> None:
        super().__init__(label="test-microphone")
        self._frames: asyncio.Queue[rtc.AudioFrame] = asyncio.Queue()

    def send(self, chunk: bytes) -> None:
        self._frames.put_nowait(
            rtc.AudioFrame(
                data=chunk, sample_rate=RATE, num_channels=1, samples_per_channel=len(chunk) // 2
            )
        )

    async def __anext__(self) -> rtc.AudioFrame:
        return await self._frames.get()


class Speaker(io.AudioOutput):
    """The session's audio output: keeps each segment's frames and plays them out in
    real time (a segment is done when its audio would have finished playing)."""

    def __init__(self) -> None:
        super().__init__(label="test-speaker", capabilities=io.AudioOutputCapabilities(pause=False))
        self.segments: list[dict[str, Any]] = []
        self._current: dict[str, Any] | None = None
        self._playout: asyncio.Task[None] | None = None

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        if self._current is None:
            self._current = {"first_s": time.monotonic(), "frames": [], "pcm": ""}
            self.segments.append(self._current)
            self.on_playback_started(created_at=time.time())
        self._current["frames"].append(
            [frame.sample_rate, frame.num_channels, frame.samples_per_channel]
        )
        self._current["pcm"] += base64.b64encode(frame.data.tobytes()).decode()
        self._current["last_s"] = time.monotonic()

    def _played_s(self, segment: dict[str, Any]) -> float:
        return float(sum(n / rate for rate, _, n in segment["frames"]))

    def flush(self) -> None:
        super().flush()
        segment, self._current = self._current, None
        if segment is None:
            return
        duration = self._played_s(segment)
        remaining = max(0.0, segment["first_s"] + duration - time.monotonic())

        async def play_out() -> None:
            await asyncio.sleep(remaining)
            self.on_playback_finished(playback_position=duration, interrupted=False)

        self._playout = asyncio.create_task(play_out())

    def clear_buffer(self) -> None:
        segment, self._current = self._current, None
        if segment is not None:
            segment["cleared"] = True
            self.on_playback_finished(playback_position=0.0, interrupted=True)


@function_tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


@function_tool
async def get_time(city: str) -> str:
    """The local time in a city."""
    return "noon"


async def scenario() -> None:
    question = read_wav(ARGS.question)
    # The stock model: only where it connects, a key, the delegation and the
    # model name are set.
    model = GPTLiveModel(
        base_url=ARGS.url, api_key="sk-unused", delegation=ARGS.delegation, model="gpt-live-1"
    )
    session: AgentSession[None] = AgentSession(llm=model)
    mic, speaker = MicInput(), Speaker()
    session.input.audio = mic
    session.output.audio = speaker
    responses = ARGS.delegation == "responses"
    agent = Agent(instructions=INSTRUCTIONS, tools=[get_weather] if responses else [])
    track: list[list[Any]] = []  # [received_s, base64] of each session.output_audio.delta
    frames: list[dict[str, Any]] = []  # every other server frame, as it came
    states: list[str] = []
    sent: list[dict[str, Any]] = []  # every client frame but the appends

    def on_server_frame(frame: dict[str, Any]) -> None:
        RECORD.server_events.append(str(frame.get("type")))
        if frame.get("type") == "session.output_audio.delta":
            track.append([time.monotonic(), frame.get("delta", "")])
            return
        frames.append(frame)
        if frame.get("type") == "error":
            RECORD.errors.append(f"error frame: {frame.get('error')}")

    def on_client_event(ev: dict[str, Any]) -> None:
        RECORD.client_events.append(str(ev.get("type")))
        if ev.get("type") != "session.input_audio.append":
            sent.append(ev)

    def on_error(ev: ErrorEvent) -> None:
        RECORD.error(f"session error from {type(ev.source).__name__}", ev.error)

    def on_close(ev: CloseEvent) -> None:
        RECORD.facts["close_reason"] = str(ev.reason)
        if ev.error is not None:
            RECORD.error("close event", ev.error)

    def on_state(ev: AgentStateChangedEvent) -> None:
        states.append(ev.new_state)

    session.on("error", on_error)
    session.on("close", on_close)
    session.on("agent_state_changed", on_state)
    timeout = ARGS.timeout
    try:
        async with Microphone(mic.send) as microphone:
            await session.start(agent)
            duplex = agent.duplex_session
            duplex.on("openai_server_event_received", on_server_frame)
            duplex.on("openai_client_event_queued", on_client_event)
            # Its frames from here on; `session_id` is set by `session.started`,
            # which may have come before.
            assert isinstance(duplex, GPTLiveSession)
            await wait_for(lambda: duplex.session_id is not None, timeout, "session.started")
            RECORD.facts["session_id"] = duplex.session_id
            RECORD.step("started")
            if responses:
                await agent.update_tools([get_weather, get_time])
                await wait_for(
                    lambda: "session.updated" in RECORD.server_events, timeout, "session.updated"
                )
                RECORD.step("tools_updated")
            await microphone.say(question)
            RECORD.step("spoken")
            await asyncio.sleep(SILENCE_S)  # live silence while the model goes on
            RECORD.step("silence")
            await wait_for(lambda: speaker.segments != [], timeout, "the agent's first audio")
            RECORD.step("played")
            # Audio still playing out is the agent's; the close waits for none of it.
            await session.aclose()
            RECORD.step("closed")
    finally:
        RECORD.facts.update(
            track=track,
            frames=frames,
            sent=sent,
            segments=speaker.segments,
            agent_states=states,
        )
        await model.aclose()


run(RECORD, scenario, ARGS.out)
