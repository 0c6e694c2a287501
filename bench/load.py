"""Load generator: N concurrent Realtime sessions with real paced audio, per level.

    python -m bench.load --backend synthetic --sessions 1,50,200,500
    python -m bench.load --backend cascade --sessions 1,4 --turns 3
    python -m bench.load --backend cascade --sessions 1 --turns 3 --lane native --voice espeak
    python -m bench.load --backend cascade --sessions 1 --turns 3 --lane semantic_vad \
        --voice espeak --no-preempt

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
- `semantic_vad`: the `server_vad` lane's client with
  `turn_detection: {"type": "semantic_vad"}` (`eagerness` omitted: `auto`):
  the server's semantic end of turn decides.
- `native`: the native duplex lane (`extra_body.native_duplex: true`): the
  model listens, and answers speech followed by silence; no commit.

In the `server_vad`, `semantic_vad` and native lanes each session is a live microphone: one
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
  (the server's own endpointing, the live lanes);
- user transcripts (`conversation.item.input_audio_transcription.completed`)
  that are empty or missing: the lane did not hear the user. Both count as
  errors (`empty_transcript`, `transcript_missing`);
- audio chunk gap max: the largest gap between the arrivals of two audio
  deltas of a response; and what a listener hears of it (a player that
  starts at the first delta): the silence at the first join
  (`audio_first_join_silence_ms`) and the longest (`audio_silence_max_ms`);
- preemptive answers (issue 27): the deltas over the level of the session's
  `antiphon_session_preemptive_answers_total{outcome}` (started, used, or why
  one was dropped) and stage0's `antiphon_stage0_utterance_pauses_total`
  (reported, resumed, ended), as `preemptive` and a second table
  (bench/lib/firstaudio.py); `--no-preempt` starts the stack with them off
  (`-nopreempt` in the file name);
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

`--profile-at N` samples the Python processes of stage0 (front ends, the
engine core), stage1 (its workers), the session and the gateway with py-spy
through level N: each one's raw samples go to /tmp/antiphon-profile-<out>-N/,
and its busiest thread's functions (share of samples, inclusive and self) are
printed and kept in the level's `profile`.

`--session-replicas N` runs N session processes behind the gateway's
round-robin channel, as a cluster's session pods are; their metrics are
summed, their CPU is reported per replica (`session`, `session_1`, ...).

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
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from antiphon.client.load import (
    LANES,
    LoadOptions,
    Question,
    capacity,
    lane_session,
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
from bench.lib import firstaudio
from bench.lib.firstaudio import PREEMPT_OFF_ENV, Preemptive
from bench.lib.loadstack import LoadStack, StageLatencies, stack_env
from bench.lib.machine import device_name, gpu_sharing
from bench.lib.profile import profile_summary, profiled_services
from bench.lib.questions import LONG_ANSWER, QUESTIONS
from bench.lib.results import RESULTS, git_commit, write_json
from bench.lib.speech import spoken_or_noise
from deploy.local.stack import DEFAULT_PROFILE

# The barge-in trials ask for LONG_ANSWER, and interrupt it with this.
BARGE = "Wait, stop. Tell me something else instead."


# The services `--profile-at` samples: where the voice path's CPU goes, the
# stages' and the two relays' (every append and every answer's audio passes
# the session's and the gateway's one event loop each).
PROFILED = ("stage0", "stage1", "session", "gateway")


def profiles(files: dict[str, Path]) -> dict[str, str]:
    """Each sampled process's summary ("service pid" -> text), printed as it is read."""
    out = {}
    for label, path in files.items():
        out[label] = profile_summary(path) if path.is_file() else f"{path}: not written"
        print(f"== {label}\n{out[label]}", flush=True)
    return out


def speech(text: str, voice: str) -> bytes:
    return spoken_or_noise(text, "espeak" if voice == "espeak" else "piper")


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.load", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--backend", choices=["synthetic", "cascade"], default="synthetic")
    parser.add_argument("--sessions", default="1,50,200,500", help="levels, comma-separated")
    parser.add_argument("--turns", type=int, default=3, help="turns per session")
    parser.add_argument(
        "--lane",
        choices=list(LANES),
        default="manual",
        help="manual: commit + response.create; server_vad / semantic_vad / native: "
        "a live mic, no commit",
    )
    parser.add_argument(
        "--no-preempt",
        action="store_true",
        help="the stack without preemptive answers (session preemptive_answers=false)",
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
    parser.add_argument(
        "--profile", type=Path, default=DEFAULT_PROFILE, help="the deploy profile the stack reads"
    )
    parser.add_argument(
        "--front-ends",
        type=int,
        default=1,
        help="stage0's llm_front_ends (the profile's is overridden)",
    )
    parser.add_argument(
        "--stage1-workers",
        type=int,
        default=1,
        help="stage1's worker_processes (the profile's is overridden)",
    )
    parser.add_argument(
        "--session-replicas",
        type=int,
        default=1,
        help="session processes, behind the gateway's round-robin channel",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for every service of the stack (repeatable), e.g. "
        "ANTIPHON_LLM_LOAD_FORMAT=dummy",
    )
    parser.add_argument(
        "--silence-ms",
        type=int,
        default=None,
        help="server_vad's silence_duration_ms (default: the server's, 500 as OpenAI's); "
        "the turn detector's floor under end of speech -> first audio",
    )
    parser.add_argument(
        "--profile-at",
        type=int,
        default=None,
        help="sample stage0's and stage1's processes with py-spy through this level",
    )
    parser.add_argument("--py-spy", default="py-spy", help="the py-spy executable (--profile-at)")
    parser.add_argument(
        "--eagerness",
        choices=["low", "medium", "high", "auto"],
        default=None,
        help="semantic_vad's eagerness (default: the server's, auto as OpenAI's)",
    )
    parser.add_argument(
        "--start-spread-s",
        type=float,
        default=None,
        help="the sessions' first turns start spread over this many seconds "
        "(default: one utterance, a burst of ends of turn; 10: a turn's period)",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    levels = [int(x) for x in args.sessions.split(",") if x.strip()]
    args.timeout = args.timeout or (30.0 if args.backend == "synthetic" else 300.0)
    args.no_response_s = args.no_response_s or (10.0 if args.backend == "synthetic" else 60.0)
    # The manual lane keeps its historical file name (other tooling reads it).
    name = args.backend if args.lane == "manual" else f"{args.backend}-{args.lane}"
    name += "-nopreempt" if args.no_preempt else ""
    name += f"-silence{args.silence_ms}" if args.silence_ms is not None else ""
    name += f"-{args.eagerness}" if args.eagerness is not None else ""
    out: Path = args.out or RESULTS / f"load-{name}.json"
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
        silence_ms=args.silence_ms,
        eagerness=args.eagerness,
        start_spread_s=args.start_spread_s,
    )
    # Room for every session of every level at once: sessions a level leaves
    # behind (a socket that died) hold their slot until they are reaped.
    limit = max(4, sum(levels) + 16)
    report = new_report(
        args.lane,
        lane_session(args.lane, args.silence_ms, args.eagerness),
        per_question,
        args.turns,
        backend=args.backend,
        voice=args.voice,
        commit=git_commit(),
    )
    report["machine"]["open_files_limit"] = fd_limit
    report["machine"]["device"] = device_name()
    report["machine"]["gpu_sharing"] = gpu_sharing()
    overrides = PREEMPT_OFF_ENV if args.no_preempt else {}
    report["preemptive_answers"] = not args.no_preempt
    report["env"] = (
        stack_env(args.backend, limit) | overrides | dict(kv.split("=", 1) for kv in args.env)
    )
    report["profile"] = args.profile.name
    report["front_ends"] = args.front_ends
    report["stage1_workers"] = args.stage1_workers
    report["session_replicas"] = args.session_replicas
    bench: LoadStack | None = None
    try:
        for n in levels:
            if bench is None or args.fresh_stack:
                if bench is not None:
                    bench.stop()
                bench = LoadStack(
                    args.backend,
                    report["env"],
                    args.profile,
                    args.front_ends,
                    args.stage1_workers,
                    args.session_replicas,
                )
                report.setdefault("startup_s", bench.startup_s)
            options = replace(options, label=f"{args.backend} {args.lane} x{n}")
            sessions = bench.stack.session_metrics_ports
            preemptive = Preemptive(sessions, bench.stage0_metrics_ports)
            preemptive.mark()
            stages = StageLatencies(
                bench.stage0_metrics_ports,
                bench.stage1_metrics_ports,
                [*sessions, bench.stack.ports.gateway],
            )
            spy = args.py_spy if n == args.profile_at else None
            profiled = {*PROFILED, *bench.stack.session_names}
            roots = {name: p.pid for name, p in bench.stack.procs.items() if name in profiled}
            # The raw samples stay in /tmp: a device call brings back few files.
            into = Path(tempfile.gettempdir()) / f"antiphon-profile-{out.stem}-{n}"
            with profiled_services(spy, roots, into) as files:
                level = run_async(run_level(bench.url, n, questions, options, bench.sampler))
            level["stages"] = stages.delta()
            if files:
                level["profile"] = profiles(files)
            # Closed sessions finish their cleanup before the next level starts.
            level["after"] = bench.drain()
            level["preemptive"] = preemptive.delta()
            report["levels"].append(level)
            first = len(report["levels"]) == 1
            print_table(args.backend, [level], header=first)
            firstaudio.print_table(args.backend, [level], header=first)
        if args.barge_in:
            env = stack_env(args.backend, limit, barge=True) | overrides
            if bench is None or env != bench.env:
                if bench is not None:
                    bench.stop()
                bench = LoadStack(args.backend, env)
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
        report["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
        write_json(out, report)
        if report["levels"]:
            plot(report, out.with_suffix(".png"))
    print_summary(report, out)
    if report["levels"]:
        firstaudio.print_table(args.backend, report["levels"], header=True)


if __name__ == "__main__":
    main()
