"""One load level: N concurrent sessions against a running server, with a progress bar.

The sessions open (at most `open_concurrency` at a time), then each takes
`turns` turns in its lane; their start times are spread over one utterance
(or `start_spread_s`) so that commits do not all land together. In the live
lanes each session's microphone opens `LEAD_IN_CHUNKS` of silence before its
first question and streams until its last answer has played out. The level's
summary is `report.summarize_level`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from antiphon.client.errors import ClientError
from antiphon.client.load.lanes import lane_session
from antiphon.client.load.questions import CHUNK_MS, Question
from antiphon.client.load.report import summarize_level
from antiphon.client.load.session import LoadSession, SessionError, TurnResult
from antiphon.client.load.usage import OwnUsage, Usage
from antiphon.client.microphone import Microphone

# Live lanes: the microphone is open (silence) this long before the first question.
LEAD_IN_CHUNKS = 2


@dataclass(frozen=True)
class LoadOptions:
    """How each session of a level behaves."""

    lane: str = "manual"
    turns: int = 3
    # Per response: `response.done` this long after the commit (or end of speech).
    timeout_s: float = 30.0
    # Live lanes: no `response.created` this long after the end of speech is a
    # `no_response` turn (the session goes on with its next one).
    no_response_s: float = 10.0
    open_concurrency: int = 32
    api_key: str | None = None
    # The stage clocks are zero (synthetic backend): report the `overhead` block.
    overhead: bool = False
    # The progress bar's label ("" for "<lane> x<sessions>"); None: no bar.
    label: str | None = ""
    # server_vad's silence_duration_ms; None: the server's default.
    silence_ms: int | None = None
    # semantic_vad's eagerness; None: the server's default (`auto`).
    eagerness: str | None = None
    # The sessions' first turns start spread over this many seconds. None: one
    # utterance, so that the first turns all end within it (a burst of ends of
    # turn); a turn's period (8-12 s) gives them the phases later turns have.
    start_spread_s: float | None = None


async def loop_lag(samples: list[float], period_s: float = 0.1) -> None:
    """How late this event loop wakes up: the client's own share of any latency."""
    while True:
        t = time.monotonic()
        await asyncio.sleep(period_s)
        samples.append((time.monotonic() - t - period_s) * 1000)


async def run_level(
    url: str,
    n: int,
    questions: Callable[[int, int], Question],
    options: LoadOptions,
    usage: Usage | None = None,
) -> dict[str, Any]:
    """`n` sessions on `url`, each asking `questions(session, turn)`; the level's summary."""
    from tqdm import tqdm

    own: OwnUsage | None = None
    if usage is None:
        usage = own = OwnUsage()
    window = usage.mark()
    lag: list[float] = []
    lag_task = asyncio.create_task(loop_lag(lag))
    turns = options.turns
    bar = tqdm(
        total=n * turns,
        desc=options.label or f"{options.lane} x{n}",
        unit="turn",
        file=sys.stderr,
        disable=options.label is None,
    )
    refused: Counter[str] = Counter()
    aborted: Counter[str] = Counter()
    open_ms: list[float] = []
    results: list[TurnResult] = []
    gate = asyncio.Semaphore(options.open_concurrency)
    opened: list[LoadSession] = []
    # The spread the level used, for its report (None: it never got that far).
    spread_s: float | None = None
    session_body = lane_session(options.lane, options.silence_ms, options.eagerness)

    async def open_one(i: int) -> LoadSession | None:
        async with gate:
            t0 = time.monotonic()
            try:
                s = await LoadSession.open(
                    i, url, session_body, options.timeout_s, api_key=options.api_key
                )
            except SessionError as exc:
                refused[exc.code] += 1
                return None
            open_ms.append((time.monotonic() - t0) * 1000)
            bar.set_postfix_str(f"opened {len(open_ms)}/{n}", refresh=False)
            return s

    try:
        opened = [s for s in await asyncio.gather(*map(open_one, range(n))) if s is not None]
        bar.set_postfix_str(f"{len(opened)} open, {sum(refused.values())} refused")
        spread = options.start_spread_s
        if spread is None:
            lengths = [questions(s.index, 0).chunks for s in opened]
            spread = max(lengths, default=1) * CHUNK_MS / 1000
        spread_s = spread
        t_start = time.monotonic() + 0.5

        async def drive(k: int, s: LoadSession) -> None:
            # Start times spread (over one utterance unless set), so commits do
            # not all land together.
            start_at = t_start + spread * k / max(1, len(opened))
            done = 0
            try:
                if options.lane == "manual":
                    for t in range(turns):
                        r = await s.turn(t, questions(s.index, t), start_at, options.timeout_s)
                        results.append(r)
                        done += 1
                        bar.update(1)
                        if r.status == "timeout":  # `response_timeout`: the session gives up
                            return
                        start_at = time.monotonic()
                else:
                    await asyncio.sleep(max(0.0, start_at - time.monotonic()))
                    async with Microphone(s.client, chunk_ms=CHUNK_MS) as mic:
                        origin = (s.client.appends, time.monotonic())
                        await asyncio.sleep(LEAD_IN_CHUNKS * CHUNK_MS / 1000)
                        for t in range(turns):
                            r = await s.live_turn(
                                t,
                                options.lane,
                                mic,
                                questions(s.index, t),
                                options.timeout_s,
                                options.no_response_s,
                                origin=origin,
                            )
                            results.append(r)
                            done += 1
                            bar.update(1)
                            if r.status == "timeout":
                                return
            except SessionError as exc:
                aborted[exc.code] += 1
            except (ClientError, OSError, TimeoutError) as exc:  # the session went away
                aborted[s.closed_code or type(exc).__name__] += 1
            finally:
                bar.update(turns - done)

        t_turns = time.monotonic()
        await asyncio.gather(*(drive(k, s) for k, s in enumerate(opened)))
        turns_wall = time.monotonic() - t_turns
        await asyncio.gather(*(s.close() for s in opened))
    finally:
        bar.close()
        lag_task.cancel()
    errors: Counter[str] = Counter()
    for s in opened:
        errors.update(s.errors)
    processes = usage.usage(window)
    if own is not None:
        own.stop()
    level = summarize_level(
        n=n,
        turns=turns,
        opened=len(opened),
        refused=refused,
        aborted=aborted,
        errors=errors,
        open_ms=open_ms,
        results=results,
        turns_wall_s=turns_wall,
        lag_ms=lag,
        usage=processes,
        overhead=options.overhead,
        lane=options.lane,
        session=opened[0].session if opened else None,
    )
    level["start_spread_s"] = None if spread_s is None else round(spread_s, 2)
    return level


def raise_fd_limit(needed: int) -> int:
    """The open-file limit raised to its hard limit; warns when below `needed`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < needed:
        print(f"warning: open-file limit {soft} < {needed} needed", file=sys.stderr)
    return soft


def run_async(coro: Coroutine[Any, Any, Any]) -> Any:
    """On uvloop when installed (as the gateway runs): less client overhead per event."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
