"""Load generator: N concurrent Realtime sessions with real paced audio, per level.

    python bench/load.py --backend synthetic --sessions 1,50,200,500
    python bench/load.py --backend cascade --sessions 1,4 --turns 3
    python bench/load.py --backend cascade --sessions 1 --turns 3 --lane native --voice espeak

Starts its own stack (`LocalStack`: Redis and the four services as real
processes) and, for each level, opens that many sessions over real
WebSockets (the client package's load generator, `antiphon.client.load`:
what `antiphon bench` runs against a server it did not start), in one
`--lane`:

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
import io
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import wave
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "deploy" / "local")]

import numpy as np  # noqa: E402
from stack import LocalStack, Ports  # noqa: E402

from antiphon.client.load import (  # noqa: E402
    INPUT_RATE,
    LANES,
    LoadOptions,
    Question,
    capacity,
    new_report,
    plot,
    print_summary,
    print_table,
    raise_fd_limit,
    run_async,
    run_barge_in,
    run_level,
    shape,
    trim_leading_silence,
)
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
    per_question = [shape(args.lane, q, speech(q, args.voice)) for q in QUESTIONS]

    def questions(session: int, turn: int) -> Question:
        return per_question[(session + turn) % len(per_question)]

    options = LoadOptions(
        lane=args.lane,
        turns=args.turns,
        timeout_s=args.timeout,
        no_response_s=args.no_response_s,
        open_concurrency=args.open_concurrency,
        overhead=args.backend == "synthetic",
    )
    # Room for every session of every level at once: sessions a level leaves
    # behind (a socket that died) hold their slot until they are reaped.
    limit = max(4, sum(levels) + 16)
    report = new_report(
        args.lane,
        LANES[args.lane],
        per_question,
        args.turns,
        backend=args.backend,
        voice=args.voice,
        commit=git_commit(),
    )
    report["machine"]["open_files_limit"] = fd_limit
    report["env"] = stack_env(args.backend, limit)
    bench: Bench | None = None
    try:
        for n in levels:
            if bench is None or args.fresh_stack:
                if bench is not None:
                    bench.stop()
                bench = Bench(args.backend, stack_env(args.backend, limit))
                report.setdefault("startup_s", bench.startup_s)
            options = replace(options, label=f"{args.backend} {args.lane} x{n}")
            level = run_async(run_level(bench.url, n, questions, options, bench.sampler))
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
            question = speech(LONG_ANSWER, args.voice)
            barge = trim_leading_silence(speech(BARGE, args.voice))
            report["barge_in"] = run_async(
                run_barge_in(bench.url, question, barge, args.barge_in_trials, args.timeout)
            )
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
    print_summary(report, out)


if __name__ == "__main__":
    main()
