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


def outside_captures() -> threading.Lock:
    """Held around any use of the default CUDA generator on another thread
    (token2wav's HiFT seeds and draws its noise there): a capture holds
    that generator, and a draw or a reseed meanwhile fails with "Offset
    increment outside graph capture" and leaves it unusable, as the
    combined run on a lent H100 showed (2026-12-07 21:40)."""
    return _CAPTURING


class Graphed:
    """`run`, which reads and writes only tensors that outlive it: called as
    it is unless `capture`; else run once eagerly on a side stream (what a
    capture needs warmed up, and this call's result), then captured, and
    replayed on every later call."""

    def __init__(self, run: Callable[[], torch.Tensor], *, capture: bool) -> None:
        self._run = run
        self._capture = capture
        self._graph: Any = None
        self._out: torch.Tensor | None = None

    def __call__(self) -> torch.Tensor:
        import torch

        if not self._capture:
            return self._run()
        if self._graph is not None:
            self._graph.replay()
            assert self._out is not None
            return self._out.clone()
        with _CAPTURING:
            stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                eager = self._run()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            # The other model's thread goes on launching meanwhile: only
            # this thread's calls may break the capture.
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                self._out = self._run()
        # The capture ran nothing: this call's result is the eager one.
        self._graph = graph
        return eager
