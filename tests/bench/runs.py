"""A bench's command line run as a user runs it, from the repository root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_bench(module: str, *argv: str, timeout: float) -> str:
    """`python -m module argv...`; its stdout, or a failure that shows both
    its streams' ends."""
    done = subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout
