"""Capturing a step of the voice's models as a CUDA graph (talker_batch.py,
solver_steps.py), one capture at a time in the process.

The talker and token2wav run on threads of their own, and a capture
registers the process's default CUDA generator, which two captures cannot
hold at once: on a lent H100 (2026-12-07) a second thread's capture failed
to begin, and the failed graph's destructor aborted the worker. So the
lock is the process's, as the state it guards is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

_CAPTURING = threading.Lock()


def capture(run: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """`run()` once eagerly on a side stream (what a capture needs warmed
    up), then captured: the eager result, the graph, and the tensor each
    replay writes. The capture itself runs nothing."""
    import torch

    with _CAPTURING:
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            eager = run()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # The other model's thread goes on launching meanwhile: only this
        # thread's calls may break the capture.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            out = run()
    return eager, graph, out
