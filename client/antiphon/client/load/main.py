"""`antiphon bench`: the load generator against a running server, as one command.

    antiphon bench --url ws://127.0.0.1:8000/v1/realtime?duplex=1 \\
        --sessions 1,4 --turns 3 --lane manual --in q.wav --out-dir results/

Per level (`--sessions`, comma-separated) it opens that many sessions, each
asking the `--in` questions in turn (WAV files, any rate: converted to
PCM16 24 kHz mono), with a progress bar; it prints one line per level
(latency percentiles on the client clock, errors, CPU) and writes
`load-<lane>.json` and the PNG of the latency distributions to `--out-dir`.
The sessions speak the duplex dialect (their heartbeats, `session.close`,
the native lane): `?duplex=1` is added to a URL without it. `--url` and
`--api-key` default to `$ANTIPHON_URL` and `$ANTIPHON_API_KEY`, as for every
`antiphon` command. Exit codes: 0 every turn completed without an error, 1
some did not, 2 the server is unreachable, 3 it refused every session.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from antiphon.client import audio
from antiphon.client.connect import DEFAULT_URL, is_duplex, with_query
from antiphon.client.load.barge import run_barge_in
from antiphon.client.load.lanes import LANES
from antiphon.client.load.questions import Question, from_wav, trim_leading_silence
from antiphon.client.load.report import capacity, new_report, plot, print_summary, print_table
from antiphon.client.load.run import LoadOptions, raise_fd_limit, run_async, run_level


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="antiphon bench", description=(__doc__ or "").splitlines()[0])
    p.add_argument(
        "--url",
        default=os.environ.get("ANTIPHON_URL", DEFAULT_URL),
        help="the server's realtime WebSocket",
    )
    p.add_argument("--sessions", default="1", help="levels, comma-separated (e.g. 1,4,16)")
    p.add_argument("--turns", type=int, default=3, help="turns per session")
    p.add_argument(
        "--lane",
        choices=list(LANES),
        default="manual",
        help="manual: commit + response.create; server_vad / semantic_vad / native: "
        "a live mic, no commit",
    )
    p.add_argument(
        "--in",
        dest="inputs",
        action="append",
        type=Path,
        required=True,
        metavar="WAV",
        help="a spoken question (repeat for more: sessions take them in turn)",
    )
    p.add_argument("--out-dir", type=Path, default=Path("."), help="where the JSON and PNG go")
    p.add_argument("--name", default="", help="file name stem (default: load-<lane>)")
    p.add_argument("--timeout", type=float, default=120.0, help="per response, seconds")
    p.add_argument(
        "--no-response-s",
        type=float,
        default=30.0,
        help="live lanes: no response.created this long after the end of speech: `no_response`",
    )
    p.add_argument("--open-concurrency", type=int, default=32, help="sessions opening at once")
    p.add_argument(
        "--api-key",
        default=os.environ.get("ANTIPHON_API_KEY"),
        help="sent as `Authorization: Bearer`",
    )
    p.add_argument(
        "--barge-in",
        type=Path,
        default=None,
        metavar="WAV",
        help="also time barge-in (server_vad): ask the first --in, speak this over the answer",
    )
    p.add_argument("--barge-in-trials", type=int, default=3)
    p.add_argument(
        "--slo-ms",
        type=float,
        default=0.0,
        help="report the capacity: the most sessions whose first-audio p95 stays within this",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def bench_main(argv: Sequence[str] | None = None) -> int:
    """Run the levels, print the table, write the JSON and the PNG; the exit code."""
    args = parser().parse_args(argv)
    try:
        levels = [int(x) for x in args.sessions.split(",") if x.strip()]
    except ValueError:
        print(
            f"--sessions: not a comma-separated list of numbers: {args.sessions}", file=sys.stderr
        )
        return 2
    url = args.url if is_duplex(args.url) else with_query(args.url, duplex="1")
    try:
        questions = [from_wav(path, args.lane) for path in args.inputs]
    except (OSError, ValueError, EOFError) as exc:
        parser().error(f"--in: cannot read a question: {exc}")
    name = args.name or f"load-{args.lane}"
    out: Path = args.out_dir / f"{name}.json"
    report = new_report(
        args.lane,
        LANES[args.lane],
        questions,
        args.turns,
        backend="remote",
        url=url,
        inputs=[str(p) for p in args.inputs],
    )
    report["machine"]["open_files_limit"] = raise_fd_limit(max(levels, default=1) + 256)
    options = LoadOptions(
        lane=args.lane,
        turns=args.turns,
        timeout_s=args.timeout,
        no_response_s=args.no_response_s,
        open_concurrency=args.open_concurrency,
        api_key=args.api_key,
        label=None if args.no_progress else "",
    )

    def question(session: int, turn: int) -> Question:
        return questions[(session + turn) % len(questions)]

    try:
        for n in levels:
            level = run_async(run_level(url, n, question, options))
            report["levels"].append(level)
            print_table("remote", [level], header=len(report["levels"]) == 1)
            if level["opened"] == 0:
                print(f"antiphon: no session opened on {url}: {level['refused']}", file=sys.stderr)
                break
        if args.barge_in is not None:
            barge = trim_leading_silence(audio.read_wav(args.barge_in))
            report["barge_in"] = run_async(
                run_barge_in(
                    url,
                    audio.read_wav(args.inputs[0]),
                    barge,
                    args.barge_in_trials,
                    args.timeout,
                    progress=not args.no_progress,
                    api_key=args.api_key,
                )
            )
    except KeyboardInterrupt:
        print("interrupted: writing what was measured", file=sys.stderr)
    if args.slo_ms:
        report["capacity"] = capacity(report["levels"], args.slo_ms)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    if report["levels"]:
        plot(report, out.with_suffix(".png"))
    print_summary(report, out)
    return exit_code(report["levels"])


def exit_code(levels: list[dict[str, Any]]) -> int:
    if levels and levels[-1]["opened"] == 0:
        refused = levels[-1]["refused"]
        return 2 if all(code.startswith("connect_") for code in refused) else 3
    clean = all(
        lv["turns_completed"] == lv["turns_expected"] and not lv["errors"]["count"] for lv in levels
    )
    return 0 if clean and levels else 1


if __name__ == "__main__":
    raise SystemExit(bench_main())
