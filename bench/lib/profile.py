"""py-spy on a worker through one level (`--profile-at` of bench.gpu and
bench.load), and what its samples say (`--profile-summary`)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import psutil


@contextlib.contextmanager
def profiled(py_spy: str | None, pid: int, out: Path) -> Iterator[None]:
    """py-spy sampling process `pid` meanwhile, each thread's stacks collapsed into
    `out` (flamegraph's format; `--profile-summary` reads it). Nothing when
    `py_spy` is unset or not found; a py-spy that cannot attach says so in
    `out`.log and the level runs all the same."""
    # Also beside this interpreter: a venv's py-spy, when the venv is not on PATH
    # (`make` runs .venv/bin/python as it is).
    exe = None
    if py_spy:
        exe = shutil.which(py_spy) or shutil.which(py_spy, path=Path(sys.executable).parent)
    if exe is None:
        if py_spy:
            print(f"no {py_spy}: the level runs unprofiled", flush=True)
        yield
        return
    log = out.with_suffix(".log").open("wb")
    # --nonblocking: the worker is not paused at each sample (its timing stays its own).
    cmd = [exe, "record", "--pid", str(pid), "--rate", "250", "--threads", "--nonblocking"]
    spy = subprocess.Popen(
        [*cmd, "--format", "raw", "--output", str(out)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield
    finally:
        # SIGINT: py-spy writes what it sampled, then exits.
        spy.send_signal(signal.SIGINT)
        try:
            spy.wait(60)
        except subprocess.TimeoutExpired:
            spy.kill()
        log.close()


def python_processes(pid: int) -> list[int]:
    """`pid` and its descendants that run Python: a service's worker processes
    (stage1's `worker_processes`, stage0's front ends) and vLLM's engine core."""
    found = []
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            if Path(proc.exe()).name.startswith("python"):
                found.append(proc.pid)
    return found


@contextlib.contextmanager
def profiled_services(
    py_spy: str | None, services: Mapping[str, int], into: Path
) -> Iterator[dict[str, Path]]:
    """`profiled` on every Python process of each service (by its root pid)
    meanwhile; yields "service pid" -> the file its samples go to (in the
    folder `into`, as service-pid.txt). Nothing when `py_spy` is unset."""
    files: dict[str, Path] = {}
    with contextlib.ExitStack() as stack:
        if py_spy:
            into.mkdir(parents=True, exist_ok=True)
            for service, root in services.items():
                for pid in python_processes(root):
                    out = into / f"{service}-{pid}.txt"
                    files[f"{service} {pid}"] = out
                    stack.enter_context(profiled(py_spy, pid, out))
        yield files


def profile_summary(path: Path, top: int = 25) -> str:
    """The busiest thread of a `profiled` file: its functions by samples on the
    stack (inclusive) and at its top (self), as a share of its samples."""
    by_thread: dict[str, Counter[str]] = {}
    own: dict[str, Counter[str]] = {}
    totals: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread, *frames = stack.split(";")
        n = int(count)
        totals[thread] += n
        names = [_frame_name(f) for f in frames]
        inclusive = by_thread.setdefault(thread, Counter())
        for name in set(names):
            inclusive[name] += n
        if names:
            own.setdefault(thread, Counter())[names[-1]] += n
    if not totals:
        return f"{path}: no samples"
    thread, samples = totals.most_common(1)[0]
    lines = [f"{path.name}: {thread}, {samples} samples (of {sum(totals.values())} in all threads)"]
    # Inclusive, less the frames under nearly every sample (the loop's own, the entry point).
    inclusive = Counter({k: n for k, n in by_thread[thread].items() if n < 0.95 * samples})
    for title, counts in (("inclusive", inclusive), ("self", own.get(thread, Counter()))):
        lines.append(f"-- {title}")
        lines += [f"{100 * n / samples:5.1f}%  {name}" for name, n in counts.most_common(top)]
    return "\n".join(lines)


def _frame_name(frame: str) -> str:
    """py-spy's `function (path/to/file.py:123)` as `function (file.py)`."""
    function, _, where = frame.partition(" (")
    return f"{function} ({where.rsplit('/', 1)[-1].split(':')[0].rstrip(')')})" if where else frame
