"""Golden transcripts: a whole wire event sequence, minus what differs run to run.

Ids, sequence numbers, audio bytes and timings change every run; event
types, order, fields, statuses, reasons and text do not. A volatile value
is replaced by a placeholder of its own type (a string by `"<key>"`, a
number by 0, a list by []; null stays null), so every frame keeps its shape
and a golden frame of OpenAI's dialect is still a frame the `openai` SDK can
judge (`tests/e2e/test_golden_transcripts.py` replays each one). A run of
audio deltas (each with its transcript delta) collapses to its first audio
delta and its first transcript delta, because how many chunks fit before
an interruption depends on scheduling, not on the contract. A run of text
deltas becomes one holding the run's text: stage0 joins a response's deltas
that wait unsent (services/common/antiphon/common/outbox.py), so how the
words are cut into deltas depends on scheduling too.

Transcripts live under `golden/<dialect>/<scenario>.json`, one folder per
dialect (`openai`: `/v1/realtime`; `duplex`: `?duplex=1`).
`ANTIPHON_UPDATE_GOLDEN=1` rewrites the files (review the diff by hand); a
test run so compares nothing, so it never passes: it fails naming the file it
rewrote, or is skipped when the file already held what the run recorded.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.realtime import Event

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "e2e" / "golden"
DIALECTS = ("openai", "duplex")

# Keys whose values are per run.
_VOLATILE = {
    "event_id",
    "server_event_seq",
    "id",
    "item_id",
    "response_id",
    "previous_item_id",
    "call_id",
    "resume_token",
    "session_id",
    "incarnation",
    "attachment_generation",
    "audio_start_ms",
    "audio_end_ms",
    "playback",
    "stage_metrics",
    "audio_duration_ms",
    "audio_text_marks",
    "overlap_ms",
    "epoch",
    "turn_id",
    "history_len",
}
_DELTAS = ("response.output_audio.delta", "response.output_audio_transcript.delta")
_TEXT_DELTAS = ("response.output_text.delta", "response.text.delta")


# Any other server-made id (e.g. the item id inside a native event).
_ID = re.compile(r"\b(item|resp|sess|event|evt|own|call)_[0-9a-f]{8,}\b")
# The synthetic ASR names the audio's length, which moves by a resampler block
# between runs (and the scripted answer repeats it); the words around it are
# the contract.
_NUMBER = re.compile(r"\b\d{3,}\b")


def _placeholder(key: str, value: Any) -> Any:
    """A per-run value replaced by one of its own type."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return 0
    if isinstance(value, str):
        return f"<{key}>"
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {k: _placeholder(k, v) for k, v in sorted(value.items())}
    raise TypeError(f"unexpected {type(value).__name__} at {key!r}")


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _placeholder(k, v) if k in _VOLATILE else _scrub(v) for k, v in sorted(value.items())
        }
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, str):
        return _NUMBER.sub("<n>", _ID.sub("<id>", value))
    return value


def normalize(events: list[Event]) -> list[Any]:
    out: list[Any] = []
    run: set[str] = set()  # the delta types of the current run already kept
    for event in events:
        etype = event["type"]
        if etype in _TEXT_DELTAS and out and out[-1]["type"] == etype:
            out[-1] = {**out[-1], "delta": out[-1]["delta"] + _scrub(event)["delta"]}
            continue
        if etype not in _DELTAS:
            run = set()
            out.append(_scrub(event))
            continue
        if etype in run:
            continue
        run.add(etype)
        # The audio's bytes and the words of the first chunk are per run.
        out.append({**_scrub(event), "delta": "<delta>"})
    return out


def path_of(dialect: str, name: str) -> Path:
    assert dialect in DIALECTS, dialect
    return GOLDEN_DIR / dialect / f"{name}.json"


def transcripts(dialect: str) -> dict[str, list[Any]]:
    """Every golden transcript of `dialect`, by scenario name."""
    return {
        path.stem: json.loads(path.read_text())
        for path in sorted((GOLDEN_DIR / dialect).glob("*.json"))
    }


def check(dialect: str, name: str, events: list[Event]) -> None:
    """Compare with `golden/<dialect>/<name>.json` (or write it when updating)."""
    path = path_of(dialect, name)
    got = normalize(events)
    if os.environ.get("ANTIPHON_UPDATE_GOLDEN") == "1":
        _update(path, got)
    expected = json.loads(path.read_text())
    if got != expected:
        # Kept for a look: `diff <(jq . golden/x/y.json) <(jq . /tmp/...)`.
        Path(os.environ.get("TMPDIR", "/tmp"), f"golden-{dialect}-{name}.json").write_text(
            json.dumps(got, indent=1) + "\n"
        )
    assert got == expected, f"wire sequence differs from {dialect}/{path.name}"


def _update(path: Path, got: list[Any]) -> None:
    """Write `got` as the golden file; the test then compared nothing, so it does not pass."""
    text = json.dumps(got, indent=1) + "\n"
    if path.is_file() and path.read_text() == text:
        pytest.skip(
            f"ANTIPHON_UPDATE_GOLDEN=1: {path.name} already holds this run; nothing compared"
        )
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    pytest.fail(
        f"ANTIPHON_UPDATE_GOLDEN=1: rewrote {path}; review its diff, then run without it",
        pytrace=False,
    )
