"""The load generator: N concurrent sessions of paced speech against a running server.

Each session is a `DuplexClient` (`session.LoadSession`) taking turns in one
lane: `manual` (paced appends, commit, `response.create`), `server_vad`,
`semantic_vad` or native (a live `Microphone`: the question, then silence,
never a stop).
Every event is timed on the client clock as its frame is read; the
`EventCollector` gives commit -> first audio, end of speech -> first audio
and the gaps between audio chunks (the largest, and the first join: between the
first and second delta), and the turn's own log the rest (the
server's `speech_stopped` / `committed`, `response.done`, transcripts,
heartbeat round trips). `run.run_level` runs one level with a progress bar,
`report` summarizes it into the JSON `bench/load.py` has always written and
draws the PNG, `main.bench_main` is `antiphon bench`.

The question audio is the caller's (WAV files, or PCM16 24 kHz from any
voice): nothing here imports the server's code.
"""

from antiphon.client.load.barge import barge_in_trial, run_barge_in
from antiphon.client.load.lanes import LANES, MANUAL, NATIVE, SEMANTIC_VAD, SERVER_VAD, lane_session
from antiphon.client.load.main import bench_main
from antiphon.client.load.questions import (
    CHUNK_BYTES,
    CHUNK_MS,
    INPUT_RATE,
    Question,
    from_wav,
    live_question,
    manual_question,
    shape,
    trim_leading_silence,
)
from antiphon.client.load.report import capacity, new_report, plot, print_summary, print_table
from antiphon.client.load.run import LoadOptions, raise_fd_limit, run_async, run_level
from antiphon.client.load.session import (
    LoadClient,
    LoadSession,
    SessionError,
    TurnResult,
    audio_joins,
)

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_MS",
    "INPUT_RATE",
    "LANES",
    "MANUAL",
    "NATIVE",
    "SEMANTIC_VAD",
    "SERVER_VAD",
    "LoadClient",
    "LoadOptions",
    "LoadSession",
    "Question",
    "SessionError",
    "TurnResult",
    "audio_joins",
    "barge_in_trial",
    "bench_main",
    "capacity",
    "from_wav",
    "lane_session",
    "live_question",
    "manual_question",
    "new_report",
    "plot",
    "print_summary",
    "print_table",
    "raise_fd_limit",
    "run_async",
    "run_barge_in",
    "run_level",
    "shape",
    "trim_leading_silence",
]
