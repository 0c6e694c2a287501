"""Runs a client driver in the clients venv and reads what it saw.

Each driver (`drive_<lib>.py`) runs in the clients venv (`make clients`:
`.venv-clients`, the libraries at the versions pinned in
`tests/clients/requirements.txt`), since their dependencies are not the
stack's. The test writes the spoken fixtures as WAV, runs the driver against
the session's `model_stack`, and judges the JSON record the driver writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.speech import Voice, spoken

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CLIENTS_PYTHON = REPO / ".venv-clients" / "bin" / "python"
# A whole scenario: several spoken turns in real time on two shared CPU cores.
DRIVER_TIMEOUT_S = 480
STEP_TIMEOUT_S = 120


@dataclass(frozen=True)
class Utterance:
    text: str
    voice: Voice
    words: frozenset[str]  # what the user's transcript must hold


def write_wav(path: Path, u: Utterance) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes(spoken(u.text, 24000, u.voice))
    return path


def drive(
    driver: str,
    url: str,
    question: Utterance,
    interruption: Utterance | None,
    tmp: Path,
    follow_up: Utterance | None = None,
    options: Sequence[str] = (),
) -> dict[str, Any]:
    """Run `tests/clients/<driver>` in the clients venv (with the driver's own
    `options`, if any); its JSON record."""
    if not CLIENTS_PYTHON.exists():
        pytest.fail(f"{CLIENTS_PYTHON} is missing: run `make clients`", pytrace=False)
    out = tmp / "record.json"
    args = [
        str(CLIENTS_PYTHON),
        str(HERE / driver),
        "--url", url,
        "--question", str(write_wav(tmp / "question.wav", question)),
        "--out", str(out),
        "--timeout", str(STEP_TIMEOUT_S),
    ]  # fmt: skip
    if interruption is not None:
        args += ["--interruption", str(write_wav(tmp / "interruption.wav", interruption))]
    if follow_up is not None:
        args += ["--follow-up", str(write_wav(tmp / "follow_up.wav", follow_up))]
    args += options
    env = {
        **os.environ,
        # Nothing may be fetched from a model hub, and no trace leaves this machine.
        "HF_HUB_OFFLINE": "1",
        "OPENAI_AGENTS_DISABLE_TRACING": "1",
        "OPENAI_API_KEY": "sk-unused",
    }
    log = tmp / "driver.log"
    try:
        proc = subprocess.run(
            args, cwd=HERE, env=env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S
        )
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-4000:]
        pytest.fail(f"{driver} ran past {DRIVER_TIMEOUT_S}s:\n{tail!r}")
    log.write_text(proc.stdout + proc.stderr)
    if not out.exists():
        pytest.fail(f"{driver} wrote no record (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    record: dict[str, Any] = json.loads(out.read_text())
    record["log"] = str(log)
    print(f"{driver}: steps {record['steps']}; log {log}", file=sys.stderr)
    return record


def words(text: str) -> set[str]:
    return {w.strip(".,!?;:'\"").lower() for w in text.split()}


def says(transcripts: list[str], u: Utterance) -> bool:
    """Whether one of `transcripts` holds every word `u` must be heard by."""
    return any(u.words <= words(t) for t in transcripts)


def heard(record: dict[str, Any], u: Utterance) -> bool:
    """Whether a server transcript of the user's audio holds `u`'s words."""
    return says(record["user_transcripts"], u)


def responses(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The server's responses in the order they were created."""
    return [record["responses"][rid] for rid in record["created"]]


def no_errors(record: dict[str, Any]) -> None:
    """The library surfaced no error: no error frame, event, exception or logged error."""
    assert record["errors"] == [], "\n".join(record["errors"])


def scenario_ok(record: dict[str, Any]) -> None:
    """The driver went through its whole scenario; else where it stopped and why."""
    assert record["failure"] is None, (
        f"stopped after {record['steps'][-1:]}:\n{record['failure']}\n"
        f"errors: {record['errors'][:5]}\nlog: {record['log']}"
    )
