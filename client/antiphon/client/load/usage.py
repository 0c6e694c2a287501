"""CPU and memory during a load level: the load generator's own, or more.

A run against a server it did not start measures its own process only
(`OwnUsage`); `bench/load.py`, which starts the services, passes its
sampler of every service's process tree instead. Both answer the same two
calls: `mark()` opens a window, `usage(window)` reports it per process as
CPU seconds, CPU % of one core (mean, and peak over any second) and current
and peak RSS in MiB.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from typing import Any, Protocol


class Usage(Protocol):
    def mark(self) -> Any: ...

    def usage(self, window: Any) -> dict[str, dict[str, Any]]: ...


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class OwnUsage:
    """This process, sampled every `interval_s` on a daemon thread; reported as `loadgen`."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._peak_rss = _rss_bytes()
        self._peak_cpu_pct = 0.0
        self._rate_from = (time.monotonic(), _cpu_s())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="own-usage", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        now, cpu = time.monotonic(), _cpu_s()
        with self._lock:
            self._peak_rss = max(self._peak_rss, _rss_bytes())
            since, cpu_then = self._rate_from
            if now - since >= 1.0:
                self._peak_cpu_pct = max(self._peak_cpu_pct, 100 * (cpu - cpu_then) / (now - since))
                self._rate_from = (now, cpu)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def mark(self) -> tuple[float, float]:
        with self._lock:
            self._peak_rss = _rss_bytes()
            self._peak_cpu_pct = 0.0
            self._rate_from = (time.monotonic(), _cpu_s())
            return self._rate_from

    def usage(self, window: tuple[float, float]) -> dict[str, dict[str, Any]]:
        self._sample()
        wall = max(1e-9, time.monotonic() - window[0])
        cpu = _cpu_s() - window[1]
        with self._lock:
            return {
                "loadgen": {
                    "cpu_s": round(cpu, 2),
                    "cpu_pct": round(100 * cpu / wall, 1),
                    "cpu_pct_peak": round(self._peak_cpu_pct, 1),
                    "rss_mib": round(_rss_bytes() / 2**20, 1),
                    "peak_rss_mib": round(self._peak_rss / 2**20, 1),
                }
            }
