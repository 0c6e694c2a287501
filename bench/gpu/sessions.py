"""Sessions on the worker's own Bind stream, driven as the session service drives
them (stage_links.py), over one or more client processes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing as mp
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import grpc

from antiphon.common.grpcserver import CHANNEL_OPTIONS
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from bench.lib.machine import now
from bench.lib.questions import RECORDED_RATE, load_recorded

CHUNK_MS = 200
CHUNK_BYTES = RECORDED_RATE * 2 * CHUNK_MS // 1000
# How long one phase of a turn may take before it counts as not completed.
PHASE_TIMEOUT_S = 180.0
# Sessions one client process drives (more go to more processes, up to
# --client-procs). Each session streams paced audio and reads every delta:
# one process's loop driving 124 sessions stamps first tokens 16-27 ms late at
# p95 on its own (bench/delta_path.py, in git history), which is worker time it never spent.
PER_PROC = 16


@dataclass
class Turn:
    session: int
    turn: int
    transcript: str = ""
    answer: str = ""
    asr_ms: float | None = None
    ttft_ms: float | None = None
    stage_ttft_ms: float | None = None
    tpot_ms: float | None = None
    tokens: int = 0
    # Delta messages the answer came in (fewer than tokens once coalesced).
    deltas: int = 0
    finish: str = ""
    error: str = ""
    generate_ms: float | None = None

    @property
    def completed(self) -> bool:
        return not self.error and self.finish not in ("", "abort") and self.tokens > 0


@dataclass
class _Pending:
    transcript: asyncio.Future[tuple[float, str]] | None = None
    done: asyncio.Future[pb.GenerationDone] | None = None
    first_delta: float | None = None
    text: list[str] = field(default_factory=list)


class BenchSession:
    """One session's Bind stream, driven as the session service drives it."""

    def __init__(self, stub: stage_pb2_grpc.Stage0ServiceStub, index: int, tag: str) -> None:
        self.index = index
        self.session_id = f"bench-{tag}-{index}"
        self._stub = stub
        self._requests: asyncio.Queue[pb.Stage0Request | None] = asyncio.Queue()
        self._pending = _Pending()
        self._reader: asyncio.Task[None] | None = None
        self._call: Any = None
        self.failed = ""

    async def _outgoing(self) -> Any:
        while (req := await self._requests.get()) is not None:
            yield req

    def send(self, **kind: Any) -> None:
        self._requests.put_nowait(pb.Stage0Request(**kind))

    async def open(self, vad: bool) -> None:
        self._call = self._stub.Bind(self._outgoing())
        await asyncio.wait_for(self._call.initial_metadata(), PHASE_TIMEOUT_S)
        self._reader = asyncio.create_task(self._read())
        self.send(
            open=pb.Stage0Open(
                session_id=self.session_id,
                lane=pb.LANE_MANUAL,
                turn_detection=cpb.TurnDetection(),
                # The VAD runs unless the session never barges in (policy.py).
                skip_vad=not vad,
            )
        )

    async def _read(self) -> None:
        try:
            async for ev in self._call:
                t = now()
                kind = ev.WhichOneof("kind")
                p = self._pending
                if kind == "transcript" and p.transcript and not p.transcript.done():
                    p.transcript.set_result((t, ev.transcript.text))
                elif kind == "delta":
                    if p.first_delta is None:
                        p.first_delta = t
                    p.text.append(ev.delta.text)
                elif kind == "done" and p.done and not p.done.done():
                    p.done.set_result(ev.done)
                elif kind == "error":
                    self.failed = f"{ev.error.code}: {ev.error.message}"[:200]
                    for fut in (p.transcript, p.done):
                        if fut is not None and not fut.done():
                            fut.set_exception(RuntimeError(self.failed))
        except grpc.aio.AioRpcError as exc:
            self.failed = f"stream: {exc.code().name}"
        finally:
            for fut in (self._pending.transcript, self._pending.done):
                if fut is not None and not fut.done():
                    fut.set_exception(RuntimeError(self.failed or "stream ended"))

    async def speak(self, pcm: bytes, start: float, turn: Turn) -> None:
        """The question in real time (each chunk sent once recorded), then `commit`."""
        loop = asyncio.get_running_loop()
        self._pending.transcript = loop.create_future()
        chunks = [pcm[i : i + CHUNK_BYTES] for i in range(0, len(pcm), CHUNK_BYTES)]
        for j, chunk in enumerate(chunks):
            await asyncio.sleep(max(0.0, start + (j + 1) * CHUNK_MS / 1000 - now()))
            self.send(audio=pb.Stage0Audio(epoch=0, pcm16=chunk))
        committed = now()
        self.send(commit=pb.Stage0Commit(epoch=0, item_id=f"item-{turn.turn}"))
        heard_at, text = await asyncio.wait_for(self._pending.transcript, PHASE_TIMEOUT_S)
        turn.asr_ms = (heard_at - committed) * 1000
        turn.transcript = text

    async def answer(self, messages: list[cpb.ChatMessage], turn: Turn, args: Any) -> None:
        loop = asyncio.get_running_loop()
        done_at: asyncio.Future[pb.GenerationDone] = loop.create_future()
        self._pending = _Pending(done=done_at)
        sent = now()
        self.send(
            generate=pb.Generate(
                epoch=0,
                response_id=f"resp-{turn.turn}",
                messages=messages,
                temperature=args.temperature,
                max_output_tokens=args.max_tokens,
            )
        )
        done = await asyncio.wait_for(done_at, PHASE_TIMEOUT_S)
        p = self._pending
        turn.generate_ms = (now() - sent) * 1000
        if p.first_delta is not None:
            turn.ttft_ms = (p.first_delta - sent) * 1000
        turn.answer = "".join(p.text)
        turn.deltas = len(p.text)
        turn.finish = done.finish_reason
        turn.tokens = done.metrics.num_generation_tokens
        turn.stage_ttft_ms = done.metrics.ttft_ms
        turn.tpot_ms = done.metrics.tpot_ms

    async def close(self) -> None:
        """Half-close, as a session that ends does: the worker ends the stream."""
        self._requests.put_nowait(None)
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(self._reader), 10.0)
        if self._call is not None:
            self._call.cancel()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


def instructions(session: int) -> str:
    # Sessions share stage0's preamble (cached once) but not their own part.
    return f"You are the voice assistant of caller number {session}. Be friendly."


async def _barrier(barrier: Any) -> None:
    """Every client process reaches this point before any goes on."""
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, barrier.wait, PHASE_TIMEOUT_S * 2)
    except threading.BrokenBarrierError:
        pass


async def drive(
    addresses: list[str], indexes: list[int], turns: int, args: Any, barrier: Any, tag: str
) -> list[dict[str, Any]]:
    """Sessions `indexes`, session i on front end i mod K as the registry spreads them."""
    speech = load_recorded()
    # Several connections per front end: one HTTP/2 connection per 64 streams.
    options = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
    per = max(1, math.ceil(len(indexes) / len(addresses) / 64))
    channels = {
        a: [grpc.aio.insecure_channel(a, options=options) for _ in range(per)] for a in addresses
    }

    def stub(k: int, i: int) -> stage_pb2_grpc.Stage0ServiceStub:
        own = channels[addresses[i % len(addresses)]]
        return stage_pb2_grpc.Stage0ServiceStub(own[k % len(own)])

    sessions = [BenchSession(stub(k, i), i, tag) for k, i in enumerate(indexes)]
    records: list[Turn] = []
    history: dict[int, list[cpb.ChatMessage]] = {s.index: [] for s in sessions}
    try:
        opened = await asyncio.gather(*(s.open(args.vad) for s in sessions), return_exceptions=True)
        for s, result in zip(sessions, opened, strict=True):
            if isinstance(result, BaseException):
                s.failed = f"bind: {result!r}"[:200]
        for k in range(turns):
            await _barrier(barrier)
            start = now() + 0.2
            turn_of = {s.index: Turn(s.index, k) for s in sessions}
            await asyncio.gather(
                *(
                    _hear(s, turn_of[s.index], speech[(s.index + k) % len(speech)], start)
                    for s in sessions
                )
            )
            # Every session of the level asks at once.
            await _barrier(barrier)
            await asyncio.gather(
                *(_ask(s, turn_of[s.index], history[s.index], args) for s in sessions)
            )
            records.extend(turn_of.values())
    finally:
        await asyncio.gather(*(s.close() for s in sessions))
        for own in channels.values():
            for ch in own:
                await ch.close()
    return [asdict(r) | {"completed": r.completed} for r in records]


async def _hear(s: BenchSession, t: Turn, pcm: bytes, start: float) -> None:
    if s.failed:
        t.error = s.failed
        return
    try:
        await s.speak(pcm, start, t)
    except Exception as exc:
        t.error = f"asr: {exc!r}"[:200]


async def _ask(s: BenchSession, t: Turn, history: list[cpb.ChatMessage], args: Any) -> None:
    """Generate with the instructions and every earlier turn; the turn joins the history."""
    if t.error:
        return
    # Stripped, as the session service sends every message (session/conversation/items.py).
    user = cpb.ChatMessage(role="user", content=t.transcript.strip())
    system = cpb.ChatMessage(role="system", content=instructions(s.index))
    try:
        await s.answer([system, *history, user], t, args)
    except Exception as exc:
        t.error = f"generate: {exc!r}"[:200]
        return
    history += [user, cpb.ChatMessage(role="assistant", content=t.answer.strip())]


def _client_main(
    addresses: list[str],
    indexes: list[int],
    turns: int,
    args: dict[str, Any],
    barrier: Any,
    results: Any,
    tag: str,
) -> None:
    ns = argparse.Namespace(**args)
    try:
        results.put(asyncio.run(drive(addresses, indexes, turns, ns, barrier, tag)))
    except BaseException as exc:
        results.put([{"session": i, "turn": -1, "error": repr(exc)[:300]} for i in indexes])
        raise


def run_clients(
    addresses: list[str], sessions: int, turns: int, args: argparse.Namespace, tag: str
) -> list[dict[str, Any]]:
    """N sessions over `procs` client processes (one for a small N: no spawn)."""
    procs = max(1, min(args.client_procs, math.ceil(sessions / args.sessions_per_proc)))
    shares = [list(range(k, sessions, procs)) for k in range(procs)]
    if procs == 1:
        return asyncio.run(drive(addresses, shares[0], turns, args, threading.Barrier(1), tag))
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    results = ctx.Queue()
    plain = {
        k: v
        for k, v in vars(args).items()
        if isinstance(v, str | int | float | bool | list | type(None))
    }
    workers = [
        ctx.Process(
            target=_client_main, args=(addresses, share, turns, plain, barrier, results, tag)
        )
        for share in shares
    ]
    for w in workers:
        w.start()
    out: list[dict[str, Any]] = []
    for _ in workers:
        out.extend(results.get(timeout=PHASE_TIMEOUT_S * (2 * turns + 2)))
    for w in workers:
        w.join(30)
    return out
