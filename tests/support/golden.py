"""Golden transcripts: a whole wire event sequence, minus what differs run to run.

Ids, sequence numbers, audio bytes and timings change every run; event
types, order, statuses, reasons and text do not. A run of audio deltas
(each with its transcript delta) collapses to one marker, because how many
chunks fit before an interruption depends on scheduling, not on the contract.
`ANTIPHON_UPDATE_GOLDEN=1` rewrites the files (review the diff by hand).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from tests.support.realtime import Event

GOLDEN_DIR = Path(__file__).resolve().parent.parent / "e2e" / "golden"

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


# Any other server-made id (e.g. the item id inside a native event).
_ID = re.compile(r"\b(item|resp|sess|event|evt|own|call)_[0-9a-f]{8,}\b")
# The synthetic ASR names the audio's length, which moves by a resampler block
# between runs (and the scripted answer repeats it); the words around it are
# the contract.
_NUMBER = re.compile(r"\b\d{3,}\b")


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in sorted(value.items()) if k not in _VOLATILE}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, str):
        return _NUMBER.sub("<n>", _ID.sub("<id>", value))
    return value


def normalize(events: list[Event]) -> list[Any]:
    out: list[Any] = []
    for event in events:
        etype = event["type"]
        if etype in _DELTAS:
            if out and out[-1] == "<audio and transcript deltas>":
                continue
            out.append("<audio and transcript deltas>")
            continue
        body = {k: v for k, v in event.items() if k != "type"}
        if etype in ("session.created", "session.updated"):
            body = {}  # the session object has its own tests
        elif etype == "session.resumed":
            body.pop("session", None)  # the same session object
        out.append({"type": etype, **_scrub(body)})
    return out


def check(name: str, events: list[Event]) -> None:
    """Compare with `golden/<name>.json` (or write it when updating)."""
    path = GOLDEN_DIR / f"{name}.json"
    got = normalize(events)
    if os.environ.get("ANTIPHON_UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(got, indent=1) + "\n")
    expected = json.loads(path.read_text())
    if got != expected:
        # Kept for a look: `diff <(jq . golden/x.json) <(jq . /tmp/...)`.
        Path(os.environ.get("TMPDIR", "/tmp"), f"golden-{name}.json").write_text(
            json.dumps(got, indent=1) + "\n"
        )
    assert got == expected, f"wire sequence differs from {path.name}"
