"""Where results go (bench/results/, one folder for every benchmark) and how they are written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a run stopped mid-write leaves the last complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def git_commit() -> str:
    """The checkout's short commit ("" outside a git checkout, as on the GPU machine)."""
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


def command_line() -> str:
    """How this run was started, for the results' `command`."""
    return " ".join([Path(sys.executable).name, *sys.argv])
