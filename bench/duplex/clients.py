"""N sessions acting as the session service does, over client processes of their own:
paced audio into stage0's Bind, every ModelFrame forwarded to stage1's, audio back
(without a stage1, the frames are where it ends: bench/duplex_fanin). A model that
decides once a unit has sessions of its own (bench/duplex/units.py), driven the same way."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing as mp
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import grpc
import numpy as np

from antiphon.common.grpcserver import CHANNEL_OPTIONS
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from bench.duplex.workers import OUTPUT_RATE
from bench.lib.machine import now
from bench.lib.questions import RECORDED_RATE, load_recorded

FRAME_S = 0.080
# Streams of one HTTP/2 connection (each session has two).
STREAMS_PER_CHANNEL = 64


@dataclass
class Schedule:
    """Monotonic times shared by every client process: audio starts at `start`;
    the window is [start + warmup, end)."""

    start: float
    window_start: float
    end: float


@dataclass
class SessionRecord:
    index: int
    opened_s: float | None = None
    audio_times: list[float] = field(default_factory=list)
    frame_times: list[float] = field(default_factory=list)
    late_flagged: int = 0
    # How late the pacer sent each frame past its deadline, ms (window only).
    send_lag_ms: list[float] = field(default_factory=list)
    error: str = ""
    # A unit model's (units.py): units closed in the window, how many of them
    # were answered, and each answer's latency from the append that closed it.
    units_closed: int = 0
    units_answered: int = 0
    unit_latency_ms: list[float] = field(default_factory=list)
    # Of every frame received: how many said speak, and their text tokens.
    units_spoken: int = 0
    text_tokens: int = 0
    # A unit model's voice (bench/duplex/unit_voice.py), of the units closed in
    # the window: those spoken (sent to stage1 in a response), those whose audio
    # came, each one's latency from its frame to its audio, and each response's
    # first audio from the append that closed its first unit (and of responses
    # opened in the warm-up, apart); the audio those units brought (ms),
    # stage1's errors.
    voice_units: int = 0
    voice_units_heard: int = 0
    voice_latency_ms: list[float] = field(default_factory=list)
    voice_responses: int = 0
    first_audio_ms: list[float] = field(default_factory=list)
    first_audio_warmup_ms: list[float] = field(default_factory=list)
    voice_audio_ms: float = 0.0
    voice_error: str = ""
    voice_error_events: int = 0


def speech_loop(rate: int) -> np.ndarray:
    """The four spoken questions with a second of silence after each, at `rate`
    (linear interpolation from 16 kHz), as one loop each session starts into."""
    parts = [np.frombuffer(q, dtype="<i2").astype(np.float32) for q in load_recorded()]
    src = RECORDED_RATE
    pcm = np.concatenate([np.concatenate((p, np.zeros(src, np.float32))) for p in parts])
    t = np.arange(int(len(pcm) * rate / src)) * src / rate
    return np.interp(t, np.arange(len(pcm)), pcm).astype("<i2")


class Stream:
    """A request queue feeding one Bind call."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()

    async def requests(self) -> AsyncIterator[Any]:
        while (req := await self.queue.get()) is not None:
            yield req


async def hang_up(streams: Sequence[Stream], calls: Sequence[Any], readers: Sequence[Any]) -> None:
    """A session's end: its request streams closed, its calls cancelled, its readers done."""
    for stream in streams:
        stream.queue.put_nowait(None)
    for call in calls:
        call.cancel()
    for task in readers:
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await task


async def run_session(
    stubs: tuple[Any, Any | None],
    rec: SessionRecord,
    sched: Schedule,
    pcm: np.ndarray,
    rate: int,
    phase: float,
) -> None:
    """One session: paced audio to stage0, its frames to stage1 (if any), audio back."""
    up, down = Stream(), Stream()
    call0 = stubs[0].Bind(up.requests())
    calls = [call0]
    sid = f"bench-{rec.index}"
    up.queue.put_nowait(
        pb.Stage0Request(open=pb.Stage0Open(session_id=sid, lane=pb.LANE_NATIVE, skip_vad=True))
    )
    if stubs[1] is not None:
        calls.append(stubs[1].Bind(down.requests()))
        down.queue.put_nowait(
            pb.Stage1Request(open=pb.Stage1Open(session_id=sid, sample_rate_hz=OUTPUT_RATE))
        )
    t_open = now()
    await asyncio.gather(*(call.initial_metadata() for call in calls))
    rec.opened_s = round(now() - t_open, 3)

    async def send_audio() -> None:
        samples = int(FRAME_S * rate)
        offset = (rec.index * 7919 * samples) % len(pcm)
        # A microphone records nothing before its session opens: no burst to catch up.
        k = max(0, math.ceil((now() - sched.start - phase) / FRAME_S))
        while True:
            deadline = sched.start + phase + k * FRAME_S
            if deadline >= sched.end:
                return
            await asyncio.sleep(max(0.0, deadline - now()))
            if deadline >= sched.window_start:
                rec.send_lag_ms.append((now() - deadline) * 1000)
            at = (offset + k * samples) % (len(pcm) - samples)
            chunk = pcm[at : at + samples].tobytes()
            up.queue.put_nowait(pb.Stage0Request(audio=pb.Stage0Audio(epoch=0, pcm16=chunk)))
            k += 1

    async def forward_frames() -> None:
        async for ev in call0:
            if ev.WhichOneof("kind") == "frame":
                f = ev.frame
                t = now()
                rec.frame_times.append(t)
                if f.late and t >= sched.window_start:
                    rec.late_flagged += 1
                decode = pb.DecodeFrame(
                    epoch=f.epoch,
                    response_id=f"resp-{sid}",
                    codes=f.codes,
                    text=f.text,
                    index=f.index,
                    tokens=f.tokens,
                )
                if stubs[1] is not None:
                    down.queue.put_nowait(pb.Stage1Request(frame=decode))
            elif ev.WhichOneof("kind") == "error":
                rec.error = f"stage0 {ev.error.code}: {ev.error.message}"[:200]

    async def read_audio() -> None:
        if len(calls) < 2:
            return
        async for ev in calls[1]:
            if ev.WhichOneof("kind") == "audio":
                rec.audio_times.append(now())
            elif ev.WhichOneof("kind") == "error":
                rec.error = f"stage1 {ev.error.code}: {ev.error.message}"[:200]

    readers = [asyncio.create_task(forward_frames()), asyncio.create_task(read_audio())]
    try:
        await send_audio()
        await asyncio.sleep(max(0.0, sched.end - now()))
    finally:
        await hang_up([up, down], calls, readers)


# stage0's addresses, and stage1's (none: no stage1); several are a worker's
# front ends (duplex_front_ends).
Addresses = tuple[Sequence[str], Sequence[str]]
# One session: (stubs, its record, the schedule, the speech, its rate, its phase).
Session = Callable[
    [tuple[Any, Any | None], SessionRecord, Schedule, np.ndarray, int, float], Awaitable[None]
]


async def drive(
    addresses: Addresses,
    indexes: list[int],
    sessions: int,
    sched: Schedule,
    rate: int,
    session: Session = run_session,
    period_s: float = FRAME_S,
) -> list[dict[str, Any]]:
    """This process's sessions, each at its own phase of `period_s`; session i on
    stage0 address i mod their count (a worker's front ends), and on stage1's
    the same way."""
    pcm = speech_loop(rate)
    options = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
    per = max(1, math.ceil(len(indexes) / STREAMS_PER_CHANNEL))
    stage0, stage1 = addresses
    channels = [
        [grpc.aio.insecure_channel(a, options=options) for _ in range(per)]
        for a in (*stage0, *stage1)
    ]
    records = [SessionRecord(i) for i in indexes]

    async def one(k: int, rec: SessionRecord) -> None:
        stubs = (
            stage_pb2_grpc.Stage0ServiceStub(channels[rec.index % len(stage0)][k % per]),
            (
                stage_pb2_grpc.Stage1ServiceStub(
                    channels[len(stage0) + rec.index % len(stage1)][k % per]
                )
                if stage1
                else None
            ),
        )
        try:
            await session(stubs, rec, sched, pcm, rate, period_s * rec.index / sessions)
        except Exception as exc:
            rec.error = rec.error or f"{type(exc).__name__}: {exc}"[:200]

    try:
        await asyncio.gather(*(one(k, r) for k, r in enumerate(records)))
    finally:
        for own in channels:
            for ch in own:
                await ch.close()
    return [asdict(r) for r in records]


def _client_main(
    addresses: Addresses,
    indexes: list[int],
    sessions: int,
    sched: Schedule,
    rate: int,
    results: Any,
    session: Session,
    period_s: float,
) -> None:
    try:
        results.put(
            asyncio.run(drive(addresses, indexes, sessions, sched, rate, session, period_s))
        )
    except BaseException as exc:
        results.put([asdict(SessionRecord(i, error=repr(exc)[:200])) for i in indexes])
        raise


def run_clients(
    args: argparse.Namespace,
    addresses: Addresses,
    sessions: int,
    sched: Schedule,
    rate: int,
    session: Session = run_session,
    period_s: float = FRAME_S,
) -> list[dict[str, Any]]:
    """N sessions over up to --client-procs processes (one level of 1: this process);
    `session` runs each (a module-level function, or a partial of one: the client
    processes are spawned)."""
    procs = max(1, min(args.client_procs, math.ceil(sessions / args.sessions_per_proc)))
    shares = [list(range(k, sessions, procs)) for k in range(procs)]
    if procs == 1:
        return asyncio.run(drive(addresses, shares[0], sessions, sched, rate, session, period_s))
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    extra = (results, session, period_s)
    workers = [
        ctx.Process(target=_client_main, args=(addresses, s, sessions, sched, rate, *extra))
        for s in shares
    ]
    for w in workers:
        w.start()
    out: list[dict[str, Any]] = []
    for _ in workers:
        out.extend(results.get(timeout=sched.end - now() + 120))
    for w in workers:
        w.join(30)
    return out
