"""Helpers of the torch voice's tests: one sentence's inputs, and calls from
many threads at once (as many sessions' synthesis threads call the voice)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np


def feeds(ids: list[int]) -> dict[str, np.ndarray]:
    """One sentence's inputs, as `PiperVoice` gives them to the network."""
    return {
        "input": np.array([ids], dtype=np.int64),
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        # No noise: the same ids give the same samples.
        "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),
    }


def at_once(calls: int, call: Callable[[int], None]) -> None:
    """`call(0)` ... `call(calls - 1)`, each on a thread of its own, released
    together (as many sessions' synthesis threads call the voice), all joined."""
    start = threading.Barrier(calls)

    def run(i: int) -> None:
        start.wait()
        call(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
