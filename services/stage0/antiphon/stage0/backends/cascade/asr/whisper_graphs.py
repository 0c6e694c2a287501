"""Whisper's decode steps replayed as CUDA graphs.

A greedy step of Whisper's decoder is a few hundred small kernels, each
launched by the host: on an H200 a 24-token decode of one utterance took
45 ms, nearly all of it launching (bench/results/asr-h200-base.json), and
the four front ends of a GPU worker launch them from their own interpreters,
competing for the host with everything else. A step recorded once as a CUDA
graph is one launch.

A graph replays fixed addresses and shapes, so the recorded step works on
buffers kept here (`DecodeBuffers`, whisper_torch.py): the self-attention
cache as long as the longest decode, the cross-attention's keys and values
as long as `max_frames` with a mask over the batch's own, and the position
and step as device tensors the step advances itself. One graph per bucket
of rows (powers of two up to `max_rows`) shares one set of buffers (each
bucket its first rows) and one memory pool. A batch past the buckets (more
rows, or longer audio) runs op by op over buffers of its own size, as on a
CPU: same code, same result.

Everything is recorded at load (`DecodeGraphs.__init__`), before the worker
is ready: a recording while serving would stall its batch. `capture=False`
steps the same padded buffers op by op (a CPU, and the tests).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from antiphon.stage0.backends.cascade.asr.asr_text import token_budget
from antiphon.stage0.backends.cascade.asr.whisper_torch import DecodeBuffers, TorchWhisper

# The longest audio a decode may hear (Whisper's whole window, 30 s), in tokens.
_MAX_TOKENS = token_budget(30.0)


def _row_buckets(max_rows: int) -> list[int]:
    rows, buckets = 1, []
    while rows < max_rows:
        buckets.append(rows)
        rows *= 2
    return [*buckets, max_rows]


class DecodeGraphs:
    """`model`'s decode step for batches of up to `max_rows` rows and
    `max_frames` encoded audio frames (1,000: 20 s of audio with Whisper's
    silence after it), recorded when `capture`; `observe_run` hears how each
    batch ran: "graphs" (in the padded buffers) or "ops" (past them)."""

    def __init__(
        self,
        model: TorchWhisper,
        *,
        capture: bool,
        max_rows: int = 32,
        max_frames: int = 1000,
        observe_run: Callable[[str], None] = lambda _how: None,
    ) -> None:
        if capture and model.device.type != "cuda":
            raise ValueError("CUDA graphs need a cuda device")
        self._model = model
        self._observe_run = observe_run
        self._max_frames = max_frames
        self._buckets = _row_buckets(max_rows)
        length = len(model.tokens.prompt) + _MAX_TOKENS
        self._buffers = model.decode_buffers(max_rows, length, max_frames)
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        if capture:
            self._record()

    def _record(self) -> None:
        model = self._model
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(model.device)  # type: ignore[no-untyped-call]
        for rows in self._buckets:
            b = self._buffers.first_rows(rows)
            b.cross_mask.fill_(True)
            # Warm-up steps outside the recording: the allocator and the
            # kernels' first-use setup must not happen inside it.
            b.position.fill_(len(model.tokens.prompt))
            side.wait_stream(torch.cuda.current_stream(model.device))
            with torch.cuda.stream(side):
                for _ in range(2):
                    model.decode_step(b)
            torch.cuda.current_stream(model.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                model.decode_step(b)
            self._graphs[rows] = graph
        torch.cuda.synchronize(model.device)

    def buffers(self, rows: int, frames: int) -> DecodeBuffers | None:
        fits = rows <= self._buckets[-1] and frames <= self._max_frames
        self._observe_run("graphs" if fits else "ops")
        if not fits:
            return None
        bucket = next(b for b in self._buckets if b >= rows)
        return self._buffers.first_rows(bucket, graphed=True)

    def replay(self, rows: int) -> None:
        graph = self._graphs.get(rows)
        if graph is None:
            self._model.decode_step(self._buffers.first_rows(rows))
        else:
            graph.replay()
