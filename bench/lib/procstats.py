"""CPU seconds and peak RSS per process tree, sampled on a background thread.

A service counts with all its descendants (stage0's vLLM engine core is a
child process). CPU is cumulative user+system time from `psutil`, so the CPU
of a window is the difference of two samples; RSS is the tree's summed
resident memory, and the peak is the largest sample seen in the window.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil


def _tree(proc: psutil.Process, descendants: bool) -> list[psutil.Process]:
    if not descendants:
        return [proc]
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return [proc]


@dataclass
class _Tracked:
    name: str
    proc: psutil.Process
    descendants: bool = True
    # Last cumulative CPU seen per pid of the tree (a child that exits keeps its share).
    cpu_by_pid: dict[int, float] = field(default_factory=dict)
    # Each pid's process name, as the kernel has it (`python3` for every interpreter).
    name_by_pid: dict[int, str] = field(default_factory=dict)
    rss_bytes: int = 0
    peak_rss_bytes: int = 0
    # Highest CPU rate over any window of at least a second (a single-threaded
    # process tops out at 100: the sign of a saturated event loop).
    peak_cpu_pct: float = 0.0
    _rate_from: tuple[float, float] | None = None

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu_by_pid.values())

    def sample(self) -> None:
        rss = 0
        for p in _tree(self.proc, self.descendants):
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    self.cpu_by_pid[p.pid] = t.user + t.system
                    if p.pid not in self.name_by_pid:
                        self.name_by_pid[p.pid] = p.name()
                    rss += p.memory_info().rss
            except psutil.Error:
                continue
        if rss:
            self.rss_bytes = rss
            self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        now, cpu = time.monotonic(), self.cpu_s
        if self._rate_from is None:
            self._rate_from = (now, cpu)
        elif now - self._rate_from[0] >= 1.0:
            rate = 100 * (cpu - self._rate_from[1]) / (now - self._rate_from[0])
            self.peak_cpu_pct = max(self.peak_cpu_pct, rate)
            self._rate_from = (now, cpu)

    def reset_peaks(self) -> None:
        self.peak_rss_bytes = self.rss_bytes
        self.peak_cpu_pct = 0.0
        self._rate_from = (time.monotonic(), self.cpu_s)


@dataclass
class Window:
    """What happened between `ProcSampler.mark()` and `ProcSampler.usage(window)`."""

    wall_start: float
    # Each tree's cumulative CPU per pid at the start (the tree's is their sum).
    cpu_start: dict[str, dict[int, float]]
    machine_busy_start: float


def machine_busy_s() -> float:
    """CPU seconds all cores of the machine spent busy since boot (every process)."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


def _busiest(
    t: _Tracked, start: dict[int, float], wall: float, top: int = 3
) -> list[dict[str, Any]]:
    """The tree's `top` processes by CPU % of one core over the window."""
    pcts = {pid: 100 * (cpu - start.get(pid, 0.0)) / wall for pid, cpu in t.cpu_by_pid.items()}
    ranked = sorted(pcts.items(), key=lambda item: item[1], reverse=True)[:top]
    return [
        {"pid": pid, "name": t.name_by_pid.get(pid, "?"), "cpu_pct": round(pct, 1)}
        for pid, pct in ranked
    ]


class ProcSampler:
    """Samples named process trees every `interval_s` until `stop()`.

    Names in `alone` count their own process only (the load generator, whose
    children are the services themselves).
    """

    def __init__(
        self, pids: dict[str, int], interval_s: float = 0.5, alone: frozenset[str] = frozenset()
    ) -> None:
        self._tracked = {
            name: _Tracked(name, psutil.Process(pid), descendants=name not in alone)
            for name, pid in pids.items()
        }
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="procstats", daemon=True)
        self.sample()

    def start(self) -> ProcSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def sample(self) -> None:
        with self._lock:
            for t in self._tracked.values():
                t.sample()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()

    def mark(self) -> Window:
        """Start a window: CPU counts from here and peaks are reset to the current RSS."""
        self.sample()
        with self._lock:
            for t in self._tracked.values():
                t.reset_peaks()
            cpu = {n: dict(t.cpu_by_pid) for n, t in self._tracked.items()}
        return Window(time.monotonic(), cpu, machine_busy_s())

    def usage(self, window: Window) -> dict[str, dict[str, Any]]:
        """Per process tree: CPU seconds, CPU % of one core (mean over the window
        and peak over any second of it), current and peak RSS (MiB), and its
        busiest processes: a tree of several interpreters, as stage0's front
        ends, can be bound by one of them long before the tree's sum nears the
        machine's cores.

        `machine` is every process on the machine (CPU % of one core, out of
        100 x cores) and `others` what of it is none of the tracked trees:
        other work sharing the cores during the window."""
        self.sample()
        busy = machine_busy_s() - window.machine_busy_start
        wall = max(1e-9, time.monotonic() - window.wall_start)
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for name, t in self._tracked.items():
                start = window.cpu_start.get(name, {})
                cpu = t.cpu_s - sum(start.values())
                out[name] = {
                    "cpu_s": round(cpu, 2),
                    "cpu_pct": round(100 * cpu / wall, 1),
                    "cpu_pct_peak": round(t.peak_cpu_pct, 1),
                    "rss_mib": round(t.rss_bytes / 2**20, 1),
                    "peak_rss_mib": round(t.peak_rss_bytes / 2**20, 1),
                    "busiest": _busiest(t, start, wall),
                }
        ours = sum(u["cpu_s"] for u in out.values())
        out["machine"] = {"cpu_s": round(busy, 2), "cpu_pct": round(100 * busy / wall, 1)}
        out["others"] = {
            "cpu_s": round(busy - ours, 2),
            "cpu_pct": round(100 * (busy - ours) / wall, 1),
        }
        return out
