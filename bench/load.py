"""Load generator: N concurrent Realtime sessions with real paced audio, per level.

    python bench/load.py --backend synthetic --sessions 1,50,200,500
    python bench/load.py --backend cascade --sessions 1,4 --turns 3
    python bench/load.py --backend cascade --sessions 1 --turns 3 --lane native --voice espeak

Starts its own stack (`LocalStack`: Redis and the four services as real
processes) and, for each level, opens that many sessions over real
WebSockets, in one `--lane`:

- `manual` (default): `turn_detection: null`. Each session streams spoken
  PCM16 24 kHz in 200 ms appends in real time, commits, sends
  `response.create` and reads to `response.done`.
- `server_vad`: `turn_detection: {"type": "server_vad"}`, no commit: the
  server's VAD ends the turn and answers it.
- `native`: the native duplex lane (`extra_body.native_duplex: true`): the
  model listens, and answers speech followed by silence; no commit.

In the `server_vad` and native lanes each session is a live microphone: one
200 ms append every 200 ms on an absolute wall-clock schedule, the question
(its leading and trailing silence trimmed, so its last frame holds the end
of speech) and then silence, never a burst and never a stop, until the
answer is done and has played out in real time; then the next question.
Each session does this `--turns` times; a `session.heartbeat` goes out
mid-utterance. The question is spoken by `--voice`: `piper` (the stack's
own voice) or `espeak` (espeak-ng, an unrelated formant voice, resampled
to the session's 24 kHz input). Measured on the client's monotonic clock,
per level:

- end of speech -> first audio delta p50/p95/p99: from the send of the last
  append that holds speech to the receipt of the first
  `response.output_audio.delta` (every lane), and -> response.done;
- commit -> first audio delta p50/p95/p99, commit -> response.done (manual);
- end of speech -> `speech_stopped`, -> `committed`, -> `response.created`
  (the server's own endpointing, `server_vad` and native);
- user transcripts (`conversation.item.input_audio_transcription.completed`)
  that are empty or missing: the lane did not hear the user. Both count as
  errors (`empty_transcript`, `transcript_missing`);
- audio chunk gap max: the largest gap between two audio deltas of a response;
- heartbeat -> heartbeat_ack round trip, and the gaps between consecutive
  server events of a response;
- errors by code, refused opens by code (`duplex_session_busy`, ...);
- CPU seconds, CPU % of one core and peak RSS per service process tree
  (sampled every 0.5 s), and the load generator's own.

`--backend synthetic` sets the scripted stage clocks to zero (no ASR, TTFT
or token time), so what is left is the serving path itself: gateway,
session actor, gRPC hops and Redis writes. Its `overhead` block is that
path per event: commit -> first audio, heartbeat round trip and gaps
between events, p50/p99. `--backend cascade` runs the real models.

`--barge-in` adds trials on the `server_vad` lane: the client speaks again
as soon as the answer's first audio arrives and measures speech onset sent
-> `response.done` (cancelled) and -> that response's last audio delta.

The server limits (max_sessions, stage capacity) are raised to the largest
level, so the serving path is measured, not admission. Results go to
`--out` (JSON; by default `bench/results/load-<backend>.json` for the manual
lane and `load-<backend>-<lane>.json` for the others) and a PNG of the
latency distributions beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
import urllib.request
import wave
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "deploy" / "local")]

import numpy as np  # noqa: E402
from stack import LocalStack, Ports  # noqa: E402
from tqdm import tqdm  # noqa: E402

from bench.loadclient import (  # noqa: E402
    CHUNK_BYTES,
    CHUNK_MS,
    INPUT_RATE,
    LANES,
    SERVER_VAD,
    LoadSession,
    Mic,
    Question,
    SessionError,
    TurnResult,
    append_messages,
    barge_in_trial,
)
from bench.loadreport import plot, print_table, stats, summarize_level  # noqa: E402
from bench.procstats import ProcSampler  # noqa: E402

QUESTIONS = [
    "What is the capital of France?",
    "How many legs does a spider have?",
    "What color is the sky on a clear day?",
    "Can you name a fruit that is yellow?",
    "What is two plus two?",
]
# The barge-in trials ask for a long answer, and interrupt it.
LONG_ANSWER = "Tell me a long story about a brave knight and a dragon."
BARGE = "Wait, stop. Tell me something else instead."


# ------------------------------------------------------------------ audio
def espeak(text: str, rate: int = INPUT_RATE) -> bytes:
    """`text` spoken by espeak-ng (en-us, 150 wpm), PCM16 mono resampled to `rate`."""
    from antiphon.common.audio import resample_pcm16

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise SystemExit("espeak-ng is not installed: apt-get install -y espeak-ng")
    wav = subprocess.run(
        [exe, "-v", "en-us", "-s", "150", "--stdout", text], check=True, capture_output=True
    ).stdout
    with wave.open(io.BytesIO(wav)) as w:
        if (w.getnchannels(), w.getsampwidth()) != (1, 2):
            raise SystemExit(f"espeak-ng gave {w.getnchannels()} channels of {w.getsampwidth()} B")
        pcm, native = w.readframes(w.getnframes()), w.getframerate()
    return resample_pcm16(pcm, native, rate)


def speech(text: str, voice: str = "piper") -> bytes:
    """Spoken PCM16 24 kHz in `voice`; for Piper, a noise burst if the voice is not installed."""
    if voice == "espeak":
        return espeak(text)
    try:
        from tests.support.speech import spoken

        return spoken(text)
    except Exception as exc:  # the voice assets are missing: any sound will do for synthetic
        print(f"no Piper voice ({exc}); using noise bursts", file=sys.stderr)
        rng = np.random.default_rng(len(text))
        n = INPUT_RATE * (600 + 40 * len(text)) // 1000
        return (rng.normal(0, 3000, n).clip(-32768, 32767).astype("<i2")).tobytes()


def _loud(pcm16: bytes) -> np.ndarray[Any, np.dtype[np.intp]]:
    """Indexes of the samples that are speech: above 1% of the peak (and 200)."""
    samples = np.abs(np.frombuffer(pcm16, dtype="<i2").astype(np.int32))
    if not samples.size:
        return np.zeros(0, dtype=np.intp)
    return np.flatnonzero(samples > max(200, int(samples.max()) // 100))


def trim_leading_silence(pcm16: bytes, threshold: int = 500) -> bytes:
    samples = np.frombuffer(pcm16, dtype="<i2")
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > threshold)
    return pcm16[int(loud[0]) * 2 :] if loud.size else pcm16


def manual_question(text: str, pcm16: bytes) -> Question:
    """The voice's audio as it is (its own leading and trailing silence kept),
    then a commit: the manual lane as it has always been measured."""
    loud = _loud(pcm16)
    last = int(loud[-1]) * 2 if loud.size else len(pcm16) - 1
    return Question(text, append_messages(pcm16), max(0, last) // CHUNK_BYTES)


def live_question(text: str, pcm16: bytes) -> Question:
    """Speech from its first to its last loud sample, padded with silence to
    whole 200 ms frames: the last frame holds the end of speech, and what the
    live microphone sends after it is silence."""
    loud = _loud(pcm16)
    if loud.size:
        pcm16 = pcm16[int(loud[0]) * 2 : (int(loud[-1]) + 1) * 2]
    pcm16 += b"\x00" * (-len(pcm16) % CHUNK_BYTES)
    frames = append_messages(pcm16)
    return Question(text, frames, len(frames) - 1)


# ------------------------------------------------------------------ stack
def stack_env(backend: str, limit: int, barge: bool = False) -> dict[str, str]:
    env = {
        # The serving path is measured, not admission: room for every session.
        "ANTIPHON_MAX_SESSIONS": str(limit),
        "ANTIPHON_CAPACITY": str(limit),
        # A session whose socket died frees its slot soon (the next level needs it).
        "ANTIPHON_DISCONNECT_GRACE_S": "5",
    }
    if backend == "synthetic":
        env["ANTIPHON_BACKEND"] = "synthetic"
        if barge:
            # The scripted answer's last clause comes one token after its first audio:
            # at one word a second, that leaves a second for the barge-in to cancel it.
            env["ANTIPHON_SYNTHETIC_TOKEN_MS"] = "1000"
        else:
            # Stages answer at once: what remains is the serving path's own cost.
            env |= {
                "ANTIPHON_SYNTHETIC_ASR_MS": "0",
                "ANTIPHON_SYNTHETIC_TTFT_MS": "0",
                "ANTIPHON_SYNTHETIC_TOKEN_MS": "0",
            }
    return env


class Bench:
    def __init__(self, backend: str, env: dict[str, str]) -> None:
        self.env = env
        self.stack = LocalStack(ports=Ports.free(), extra_env=env)
        t0 = time.monotonic()
        print(f"starting the {backend} stack (logs in {self.stack.run_dir}) ...", file=sys.stderr)
        try:
            self.stack.start(timeout_s=600)
        except BaseException:
            self.stack.stop()
            raise
        self.startup_s = round(time.monotonic() - t0, 1)
        pids = {name: p.pid for name, p in self.stack.procs.items()}
        self.sampler = ProcSampler(
            {**pids, "loadgen": os.getpid()}, alone=frozenset({"loadgen"})
        ).start()

    def sessions_active(self) -> int | None:
        """The session replica's own count of the sessions it runs (its metrics)."""
        url = f"http://127.0.0.1:{self.stack.ports.session_metrics}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("antiphon_session_sessions_active "):
                return int(float(line.split()[1]))
        return None

    def drain(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Until the last level's sessions have all ended on the server (or `timeout_s`)."""
        t0 = time.monotonic()
        active = self.sessions_active()
        while active and time.monotonic() - t0 < timeout_s:
            time.sleep(0.5)
            active = self.sessions_active()
        return {"drain_s": round(time.monotonic() - t0, 1), "sessions_left": active}

    @property
    def url(self) -> str:
        # The duplex dialect: the load client uses its heartbeats, session.close,
        # barge-in signal and the native lane.
        return f"ws://127.0.0.1:{self.stack.ports.gateway}/v1/realtime?duplex=1"

    def stop(self) -> None:
        self.sampler.stop()
        self.stack.stop()


# ------------------------------------------------------------------ runs
async def loop_lag(samples: list[float], period_s: float = 0.1) -> None:
    """How late this event loop wakes up: the client's own share of any latency."""
    while True:
        t = time.monotonic()
        await asyncio.sleep(period_s)
        samples.append((time.monotonic() - t - period_s) * 1000)


SILENCE = append_messages(b"\x00\x00" * (INPUT_RATE * CHUNK_MS // 1000))[0]
# Live lanes: the microphone is open (silence) this long before the first question.
LEAD_IN_FRAMES = 2


async def run_level(
    bench: Bench,
    n: int,
    turns: int,
    questions: Callable[[int, int], Question],
    args: argparse.Namespace,
) -> dict[str, Any]:
    window = bench.sampler.mark()
    lag: list[float] = []
    lag_task = asyncio.create_task(loop_lag(lag))
    bar = tqdm(
        total=n * turns, desc=f"{args.backend} {args.lane} x{n}", unit="turn", file=sys.stderr
    )
    refused: Counter[str] = Counter()
    aborted: Counter[str] = Counter()
    open_ms: list[float] = []
    results: list[TurnResult] = []
    gate = asyncio.Semaphore(args.open_concurrency)

    async def open_one(i: int) -> LoadSession | None:
        async with gate:
            t0 = time.monotonic()
            try:
                s = await LoadSession.connect(i, bench.url, args.deflate, args.timeout)
            except SessionError as exc:
                refused[exc.code] += 1
                return None
            try:
                await s.open(LANES[args.lane], args.timeout)
            except SessionError as exc:
                refused[exc.code] += 1
                await s.close(1.0)
                return None
            open_ms.append((time.monotonic() - t0) * 1000)
            bar.set_postfix_str(f"opened {len(open_ms)}/{n}", refresh=False)
            return s

    opened = [s for s in await asyncio.gather(*(open_one(i) for i in range(n))) if s is not None]
    bar.set_postfix_str(f"{len(opened)} open, {sum(refused.values())} refused")
    lengths = [len(questions(s.index, 0).frames) for s in opened]
    spread_s = (max(lengths, default=1) * CHUNK_MS) / 1000
    t_start = time.monotonic() + 0.5
    live = args.lane != "manual"

    async def drive(k: int, s: LoadSession) -> None:
        # Start times spread over one utterance, so commits do not all land together.
        start_at = t_start + spread_s * k / max(1, len(opened))
        mic: Mic | None = None
        if live:
            mic = Mic(s, SILENCE)
            mic.start(at=start_at)
            await asyncio.sleep(
                max(0.0, start_at - time.monotonic()) + LEAD_IN_FRAMES * CHUNK_MS / 1000
            )
        try:
            for t in range(turns):
                try:
                    if mic is not None:
                        r = await s.live_turn(
                            t,
                            args.lane,
                            mic,
                            questions(s.index, t),
                            args.timeout,
                            args.no_response_s,
                        )
                    else:
                        r = await s.turn(t, questions(s.index, t), start_at, args.timeout)
                except SessionError as exc:
                    aborted[exc.code] += 1
                    bar.update(turns - t)
                    return
                except Exception as exc:  # the socket went away mid-send
                    aborted[s.closed_code or type(exc).__name__] += 1
                    bar.update(turns - t)
                    return
                results.append(r)
                bar.update(1)
                if r.status == "timeout":  # counted as `response_timeout`; the session gives up
                    bar.update(turns - t - 1)
                    return
                start_at = time.monotonic()
        finally:
            if mic is not None:
                await mic.stop()

    t_turns = time.monotonic()
    await asyncio.gather(*(drive(k, s) for k, s in enumerate(opened)))
    turns_wall = time.monotonic() - t_turns
    await asyncio.gather(*(s.close() for s in opened))
    bar.close()
    lag_task.cancel()
    errors: Counter[str] = Counter()
    for s in opened:
        errors.update(s.errors)
    return summarize_level(
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
        usage=bench.sampler.usage(window),
        synthetic=args.backend == "synthetic",
        lane=args.lane,
        session=opened[0].session if opened else None,
    )


async def run_barge_in(bench: Bench, trials: int, args: argparse.Namespace) -> dict[str, Any]:
    silence = SILENCE
    question = append_messages(speech(LONG_ANSWER, args.voice))
    barge = append_messages(trim_leading_silence(speech(BARGE, args.voice)))
    out: list[dict[str, Any]] = []
    for _ in tqdm(range(trials), desc=f"{args.backend} barge-in", unit="trial", file=sys.stderr):
        try:
            s = await LoadSession.connect(0, bench.url, args.deflate, args.timeout)
        except SessionError as exc:
            out.append({"status": "error", "note": exc.code})
            continue
        try:
            await s.open(SERVER_VAD, args.timeout)
            out.append(await barge_in_trial(s, question, barge, silence, args.timeout))
        except SessionError as exc:
            out.append({"status": "error", "note": exc.code})
        finally:
            await s.close()
        await asyncio.sleep(0.5)
    cancelled = [t for t in out if t.get("status") == "cancelled"]
    statuses = Counter(str(t.get("status")) for t in out)
    result: dict[str, Any] = {"trials": out, "statuses": dict(statuses)}
    if cancelled:
        done = [t["onset_to_done_ms"] for t in cancelled]
        last = [t["onset_to_last_audio_ms"] for t in cancelled]
        # From sending the first 200 ms frame that holds speech: the server has
        # the whole frame at once. A live microphone heard that onset one frame
        # earlier, hence `barge_in_from_capture_ms`.
        result["barge_in_ms"] = stats(done, 50, 95)
        result["barge_in_from_capture_ms"] = stats([d + CHUNK_MS for d in done], 50, 95)
        # The last audio delta of the cancelled response, after the onset (0: none after).
        result["audio_stop_ms"] = stats(last, 50, 95)
    else:
        result["barge_in_ms"] = None
        result["barge_in_from_capture_ms"] = None
        result["audio_stop_ms"] = None
        result["note"] = (
            f"the server never cancelled a response on barge-in speech ({dict(statuses)}): "
            "barge-in on the server_vad lane is not implemented, or the answer ended first"
        )
    if len(cancelled) not in (0, len(out)):
        result["note"] = f"only {len(cancelled)}/{len(out)} responses were cancelled"
    return result


def raise_fd_limit(needed: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft < needed:
        print(f"warning: open-file limit {soft} < {needed} needed", file=sys.stderr)
    return soft


def capacity(levels: list[dict[str, Any]], slo_ms: float) -> dict[str, Any]:
    """The largest level served in real time: every turn answered, no errors,
    first audio p95 within the SLO (from the commit in the manual lane, from
    the end of speech in the others). This is the number a worker's
    `capacity` setting should hold (the measurement behind it, not a guess)."""

    def first_audio(lv: dict[str, Any]) -> dict[str, Any]:
        manual = lv.get("lane", "manual") == "manual"
        key = "commit_to_first_audio_ms" if manual else "end_of_speech_to_first_audio_ms"
        return lv[key] or {}

    served = [
        lv["sessions"]
        for lv in levels
        if lv["turns_completed"] == lv["turns_expected"]
        and not lv["errors"]["count"]
        and first_audio(lv).get("p95", float("inf")) <= slo_ms
    ]
    return {"slo_ms": slo_ms, "sessions": max(served, default=0)}


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_async(coro: Coroutine[Any, Any, Any]) -> Any:
    """On uvloop when installed (as the gateway runs): less client overhead per event."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["synthetic", "cascade"], default="synthetic")
    parser.add_argument("--sessions", default="1,50,200,500", help="levels, comma-separated")
    parser.add_argument("--turns", type=int, default=3, help="turns per session")
    parser.add_argument(
        "--lane",
        choices=list(LANES),
        default="manual",
        help="manual: commit + response.create; server_vad / native: a live mic, no commit",
    )
    parser.add_argument(
        "--voice", choices=["piper", "espeak"], default="piper", help="who speaks the questions"
    )
    parser.add_argument(
        "--no-response-s",
        type=float,
        default=0.0,
        help="live lanes: a turn with no response.created this long after the end of "
        "speech is `no_response` (the session goes on with its next turn)",
    )
    parser.add_argument("--barge-in", action="store_true", help="also measure barge-in")
    parser.add_argument("--barge-in-trials", type=int, default=3)
    parser.add_argument("--fresh-stack", action="store_true", help="a new stack per level")
    parser.add_argument("--open-concurrency", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=0.0, help="per response, seconds")
    parser.add_argument("--deflate", action="store_true", help="permessage-deflate on")
    parser.add_argument(
        "--slo-ms",
        type=float,
        default=0.0,
        help="report the capacity: the most sessions whose first-audio p95 stays within this",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    levels = [int(x) for x in args.sessions.split(",") if x.strip()]
    args.timeout = args.timeout or (30.0 if args.backend == "synthetic" else 300.0)
    args.no_response_s = args.no_response_s or (10.0 if args.backend == "synthetic" else 60.0)
    # The manual lane keeps its historical file name (other tooling reads it).
    name = args.backend if args.lane == "manual" else f"{args.backend}-{args.lane}"
    out: Path = args.out or REPO / "bench" / "results" / f"load-{name}.json"
    fd_limit = raise_fd_limit(max(levels) * 2 + 256)

    print(f"preparing speech ({args.voice}) ...", file=sys.stderr)
    shape = manual_question if args.lane == "manual" else live_question
    per_question = [shape(q, speech(q, args.voice)) for q in QUESTIONS]

    def questions(session: int, turn: int) -> Question:
        return per_question[(session + turn) % len(per_question)]

    # Room for every session of every level at once: sessions a level leaves
    # behind (a socket that died) hold their slot until they are reaped.
    limit = max(4, sum(levels) + 16)
    report: dict[str, Any] = {
        "backend": args.backend,
        "lane": args.lane,
        "voice": args.voice,
        "session": LANES[args.lane],
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": git_commit(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_before": [round(x, 2) for x in os.getloadavg()],
            "open_files_limit": fd_limit,
        },
        "turns_per_session": args.turns,
        "audio_ms_per_turn": [q.audio_ms for q in per_question],
        # Where the end of speech is: the end of the last append holding speech.
        "speech_end_ms_per_turn": [(q.speech_end + 1) * CHUNK_MS for q in per_question],
        "env": stack_env(args.backend, limit),
        "levels": [],
    }
    bench: Bench | None = None
    try:
        for n in levels:
            if bench is None or args.fresh_stack:
                if bench is not None:
                    bench.stop()
                bench = Bench(args.backend, stack_env(args.backend, limit))
                report.setdefault("startup_s", bench.startup_s)
            level = run_async(run_level(bench, n, args.turns, questions, args))
            # Closed sessions finish their cleanup before the next level starts.
            level["after"] = bench.drain()
            report["levels"].append(level)
            print_table(args.backend, [level], header=len(report["levels"]) == 1)
        if args.barge_in:
            env = stack_env(args.backend, limit, barge=True)
            if bench is None or env != bench.env:
                if bench is not None:
                    bench.stop()
                bench = Bench(args.backend, env)
            report["barge_in"] = run_async(run_barge_in(bench, args.barge_in_trials, args))
            report["barge_in"]["env"] = env
    finally:
        if bench is not None:
            bench.stop()
        if args.slo_ms:
            report["capacity"] = capacity(report["levels"], args.slo_ms)
        out.parent.mkdir(parents=True, exist_ok=True)
        report["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        out.write_text(json.dumps(report, indent=2))
        if report["levels"]:
            plot(report, out.with_suffix(".png"))
    print_table(args.backend, report["levels"], header=True)
    if "barge_in" in report:
        b = report["barge_in"]
        print(f"barge-in: {b['barge_in_ms']} audio stop: {b['audio_stop_ms']} {b.get('note', '')}")
    for lv in report["levels"]:
        heard = lv["transcripts"]
        if heard["empty"] or heard["missing"]:
            print(
                f"ERROR: {args.lane} x{lv['sessions']}: {heard['empty']} empty and "
                f"{heard['missing']} missing user transcripts in {lv['turns_expected']} turns: "
                "the lane did not hear the user",
                file=sys.stderr,
            )
    if "capacity" in report:
        c = report["capacity"]
        print(f"capacity: {c['sessions']} sessions within first-audio p95 <= {c['slo_ms']} ms")
    print(f"written to {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
