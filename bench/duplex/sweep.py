"""What the reference loops share: their clock, percentiles, and the batch sizes run
one after another, each printed as a JSON line as it finishes (bench.duplex
reads them; a loop stopped at its limit keeps the lines it printed)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def quantile(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


def device_clock(device: str) -> Callable[[], float]:
    """`time.perf_counter` once the device has done what was queued on it (a
    CUDA device's kernels run asynchronously), and its peak memory counter
    reset: what a loop times each phase of its frame with."""
    import torch

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    def now() -> float:
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    return now


def sweep(
    batches: Sequence[int],
    measure: Callable[[int], dict[str, Any]],
    *,
    started: float,
    deadline_s: float,
) -> None:
    """`measure(batch)` for each batch size, skipping those that would end past
    `deadline_s` (from `started`, monotonic) and stopping at the first that
    fails (out of memory at one batch: the larger ones too)."""
    last = 0.0
    for batch in batches:
        if deadline_s and time.monotonic() - started + 1.5 * last > deadline_s:
            print(json.dumps({"sessions": batch, "skipped": "budget"}), flush=True)
            continue
        t0 = time.monotonic()
        try:
            row = measure(batch)
        except Exception as exc:
            print(
                json.dumps({"sessions": batch, "error": f"{type(exc).__name__}: {exc}"[:300]}),
                flush=True,
            )
            break
        last = time.monotonic() - t0
        row["wall_s"] = round(last, 1)
        print(json.dumps(row), flush=True)
