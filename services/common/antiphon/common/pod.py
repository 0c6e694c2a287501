"""Several workers of one tier in one pod (stage0's `llm_front_ends`, stage1's
`worker_processes`): worker i listens at the pod's port + i, serves metrics at
its metrics port + i, and takes its share of the pod's capacity; each
registers itself, so the session service spreads sessions over them as over
any workers."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing.process
import signal
from collections.abc import Sequence
from typing import Any, Protocol, Self, TypeVar

_PR_SET_PDEATHSIG = 1


class PodWorkerSettings(Protocol):
    listen: str
    metrics_port: int
    advertise_address: str
    capacity: int

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Self: ...


S = TypeVar("S", bound=PodWorkerSettings)


def worker_settings(settings: S, index: int, count: int) -> S:
    """Worker `index` of `count`'s own settings: its ports, and its share of the capacity."""
    share = settings.capacity // count + (1 if index < settings.capacity % count else 0)
    return settings.model_copy(
        update={
            "listen": shifted(settings.listen, index),
            "metrics_port": settings.metrics_port + index,
            "advertise_address": (
                shifted(settings.advertise_address, index) if settings.advertise_address else ""
            ),
            "capacity": share,
        }
    )


def shares(settings: S, count: int) -> list[tuple[S, range]]:
    """Each of `count` front ends' own settings and its rows of one stepper's
    batch (`duplex_front_ends`): its share of the capacity, in order."""
    start, out = 0, []
    for index in range(count):
        own = worker_settings(settings, index, count)
        out.append((own, range(start, start + own.capacity)))
        start += own.capacity
    return out


def check_shares(capacity: int, count: int, what: str) -> None:
    """Refuse `count` workers (`what`) of a pod whose capacity leaves one of them none."""
    if capacity < count:
        raise SystemExit(f"capacity {capacity} leaves some of the {count} {what} no session")


def shifted(address: str, by: int) -> str:
    host, _, port = address.rpartition(":")
    return f"{host}:{int(port) + by}"


def stop_with_parent() -> None:
    """SIGTERM (a drain) when the pod's supervisor dies, even by SIGKILL: a worker
    must not stay listed and serving when nobody supervises it."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_processes(
    processes: Sequence[multiprocessing.process.BaseProcess], grace_s: float
) -> None:
    """SIGTERM to each process still running (its drain), SIGKILL past the
    grace. Processes a signal kept from starting are skipped."""
    started = [p for p in processes if p.pid is not None]
    for process in started:
        if process.is_alive():
            process.terminate()
    for process in started:
        process.join(grace_s)
        if process.is_alive():
            process.kill()
            process.join()
