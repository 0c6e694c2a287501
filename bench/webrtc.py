"""WebRTC calls against WebSockets: what the media path adds, and what a call
costs the gateway.

    python -m bench.webrtc --calls 1,10,50 --out bench/results/webrtc.json

One stack (the `synthetic` stage backends: the real Silero VAD and
server_vad, scripted ASR and LLM answering at once, so what is measured is
the serving and media path), and at each level N sessions at once, first as
WebRTC calls (`POST /v1/realtime/calls`, aiortc callers: bench/lib/webrtc.py),
then as WebSockets in OpenAI's dialect (200 ms appends every 200 ms). Each
session says one question in real time, then silence, and measures end of
speech -> first audio on its own clock: on a call, the first 200 ms of sound
on the call's track (Opus decoded, as a browser would play it); on a
socket, the first `response.output_audio.delta`. Reported per level and
transport: that latency's p50/p95, and the gateway's CPU (% of one core,
mean over the level) and per session. The callers run in this process, on
the same machine: their Opus and SRTP compete with the gateway's.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import websockets

from antiphon.client.load.questions import live_question
from bench.lib.args import ints
from bench.lib.loadstack import LoadStack, stack_env
from bench.lib.results import write_json
from bench.lib.speech import spoken
from bench.lib.stats import pct
from bench.lib.webrtc import Caller

QUESTION = "What is the capital of France?"
RATE = 24000
APPEND_S = 0.2
LEAD_S = 0.6  # the microphone is live before the user speaks


async def _by_call(base_url: str, speech: bytes, timeout: float) -> float:
    caller = await Caller.dial(base_url)
    try:
        await caller.wait_for("session.created", timeout=timeout)
        await asyncio.sleep(LEAD_S)
        end_of_speech = time.monotonic() + caller.say(speech, RATE)
        await caller.wait_for("output_audio_buffer.started", timeout=timeout)
        deadline = time.monotonic() + timeout
        while (heard := caller.heard.loud_after(end_of_speech)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no audio on the call")
            await asyncio.sleep(0.05)
        return heard - end_of_speech
    finally:
        await caller.hang_up()


async def _by_socket(url: str, speech: bytes, timeout: float) -> float:
    async with websockets.connect(url, max_size=None) as ws:
        while json.loads(await ws.recv())["type"] != "session.created":
            pass
        chunk = int(RATE * APPEND_S) * 2
        audio = bytes(int(LEAD_S * RATE) * 2) + speech
        start = time.monotonic()
        end_of_speech = start + len(audio) / 2 / RATE

        async def microphone() -> None:
            # A live microphone: each 200 ms as soon as it was said (not
            # before), then silence that keeps coming.
            sent = 0
            while True:
                await asyncio.sleep(max(0.0, start + (sent + chunk) / 2 / RATE - time.monotonic()))
                piece = audio[sent : sent + chunk] if sent < len(audio) else bytes(chunk)
                sent += chunk
                audio64 = base64.b64encode(piece).decode()
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio64}))

        talking = asyncio.create_task(microphone())
        try:
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                event = json.loads(await asyncio.wait_for(ws.recv(), left))
                if event["type"] == "response.output_audio.delta":
                    return time.monotonic() - end_of_speech
        finally:
            talking.cancel()


async def _level(
    stack: LoadStack, transport: str, n: int, speech: bytes, timeout: float
) -> dict[str, Any]:
    port = stack.stack.ports.gateway
    window = stack.sampler.mark()
    if transport == "webrtc":
        runs = [_by_call(f"http://127.0.0.1:{port}", speech, timeout) for _ in range(n)]
    else:
        runs = [_by_socket(f"ws://127.0.0.1:{port}/v1/realtime", speech, timeout) for _ in range(n)]
    results = await asyncio.gather(*runs, return_exceptions=True)
    usage = stack.sampler.usage(window)
    latencies = [r * 1000 for r in results if isinstance(r, float)]
    errors = [repr(r) for r in results if not isinstance(r, float)]
    gateway = usage["gateway"]["cpu_pct"]
    return {
        "transport": transport,
        "sessions": n,
        "answered": len(latencies),
        "errors": errors[:5],
        "end_of_speech_to_first_audio_ms": {
            "p50": pct(latencies, 50),
            "p95": pct(latencies, 95),
            "max": round(max(latencies), 1) if latencies else None,
        },
        "gateway_cpu_pct": gateway,
        "gateway_cpu_pct_per_session": round(gateway / n, 2),
        "machine_cpu_pct": usage["machine"]["cpu_pct"],
    }


def _table(levels: list[dict[str, Any]]) -> None:
    print(
        "| sessions | transport | answered | eos -> first audio p50 / p95 ms "
        "| gateway CPU % | per session |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for lv in levels:
        lat = lv["end_of_speech_to_first_audio_ms"]
        print(
            f"| {lv['sessions']} | {lv['transport']} | {lv['answered']} / {lv['sessions']} "
            f"| {lat['p50']} / {lat['p95']} | {lv['gateway_cpu_pct']} "
            f"| {lv['gateway_cpu_pct_per_session']} |"
        )


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    # From its first to its last loud sample, padded to whole 200 ms appends
    # (as bench.load's live questions): the clip's end is the end of speech.
    speech = live_question(QUESTION, spoken(QUESTION, RATE, "piper")).pcm16
    stack = LoadStack("synthetic", stack_env("synthetic", 2 * max(args.calls)))
    levels: list[dict[str, Any]] = []
    try:
        for n in args.calls:
            for transport in ("webrtc", "websocket"):
                levels.append(await _level(stack, transport, n, speech, args.timeout))
                print(json.dumps(levels[-1]), flush=True)
                stack.drain()
    finally:
        stack.stop()
    report = {
        "bench": "webrtc",
        "backend": "synthetic",
        "question": QUESTION,
        "startup_s": stack.startup_s,
        "levels": levels,
    }
    if args.out:
        write_json(Path(args.out), report)
    _table(levels)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=ints, default=[1, 10, 50])
    parser.add_argument("--timeout", type=float, default=60.0, help="per session, seconds")
    parser.add_argument("--out", default="bench/results/webrtc.json")
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
