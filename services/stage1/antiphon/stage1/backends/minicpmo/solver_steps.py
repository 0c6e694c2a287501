"""The DiT call of one Euler step of token2wav's solver (token2wav.py
`_solve`), over inputs and caches copied into tensors that outlive it, so
that on a GPU it is captured once as a CUDA graph and replayed for every
step of every call of the same shape.

A step of the published DiT (16 blocks of attention, convolution and MLP)
is some 600 small kernels; ten steps a call, launched one by one from
Python, are most of what a call costs on a GPU whatever its batch. Every
step of a call has the same shapes, and calls in a turn's steady state
(caches cut back to the prompt and 100 frames, 25 codes a call) have the
same ones too, so one graph a shape serves them all. Copying a step's
caches in and out costs a few hundred megabytes of device bandwidth, well
under a millisecond on a GPU.

A step's buffers hold a tenth of its batch's solver caches twice (in and
out), a gigabyte at 32 sessions: kept for each of the last KEPT shapes,
they were most of what the graphs cost (33.1 against 25.4 GiB on an H100
at 32 sessions, bench/results/minicpmo-h100.json `voice_probe_graphs`).
Steps run one at a time, each copying its inputs in and its caches out
around its run, so every kept shape's buffers are views of one arena, as
large as the largest shape's (grown by half at least when a shape
outgrows it, dropping the steps whose graphs read the old one).

On a CPU the same step runs as it is, through the same buffers (the tests
hold it to the package's `blocks_forward_chunk` called directly).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from antiphon.stage1.backends.minicpmo.cuda_graphs import Graphed

if TYPE_CHECKING:
    import torch

# Shapes whose step (and, on a GPU, its graph) is kept.
KEPT = 4


class SolverSteps:
    """The steps of one DiT, one per shape of its inputs, the last KEPT used,
    their buffers views of one arena (the module's docstring says why)."""

    def __init__(self, dit: Any, *, capture: bool) -> None:
        self._dit = dit
        self._capture = capture
        self._steps: OrderedDict[tuple[Any, ...], _Step] = OrderedDict()
        self._arena: torch.Tensor | None = None

    @property
    def arena_bytes(self) -> int:
        return 0 if self._arena is None else self._arena.numel()

    def __call__(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        cnn: torch.Tensor,
        att: torch.Tensor,
        cnn_out: torch.Tensor,
        att_out: torch.Tensor,
    ) -> torch.Tensor:
        """`blocks_forward_chunk(x, t, None, cnn, att, cnn_out, att_out)`."""
        inputs, outputs = (x, t, cnn, att), (cnn_out, att_out)
        key = (*(tuple(a.shape) for a in (*inputs, *outputs)), att.dtype)
        step = self._steps.pop(key, None)
        if step is None:
            step = _Step(self._dit, *self._buffers(inputs, outputs), capture=self._capture)
            while len(self._steps) >= KEPT:
                self._steps.popitem(last=False)
        self._steps[key] = step
        return step(inputs, outputs)

    def _buffers(
        self, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Tensors like `inputs` and `outputs`, laid one after another in
        the arena (grown where they do not fit), each aligned."""
        import torch

        offsets, end = [], 0
        for tensor in (*inputs, *outputs):
            offsets.append(end)
            end += -(-tensor.numel() * tensor.element_size() // _ALIGN) * _ALIGN
        if self._arena is None or self._arena.numel() < end:
            grown = max(end, self.arena_bytes * 3 // 2)
            # Their graphs read the old arena, which is freed before the new one is taken.
            self._steps.clear()
            self._arena = None
            self._arena = torch.empty(grown, dtype=torch.uint8, device=inputs[0].device)
        views = [
            self._arena[o : o + t.numel() * t.element_size()].view(t.dtype).view(t.shape)
            for o, t in zip(offsets, (*inputs, *outputs), strict=True)
        ]
        return views[: len(inputs)], views[len(inputs) :]


# Where each of a step's buffers starts in the arena: CUDA's widest alignment.
_ALIGN = 256


class _Step:
    """One shape's step: its inputs copied into its buffers, the DiT run
    (or its graph replayed), the caches it wrote copied out."""

    def __init__(
        self,
        dit: Any,
        inputs: list[torch.Tensor],
        outputs: list[torch.Tensor],
        *,
        capture: bool,
    ) -> None:
        self._dit = dit
        self._inputs, self._outputs = inputs, outputs
        self._run = Graphed(self._blocks, capture=capture)

    def __call__(
        self, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        for mine, given in zip(self._inputs, inputs, strict=True):
            mine.copy_(given)
        velocity = self._run()
        for given, mine in zip(outputs, self._outputs, strict=True):
            given.copy_(mine)
        return velocity

    def _blocks(self) -> torch.Tensor:
        x, t, cnn, att = self._inputs
        cnn_out, att_out = self._outputs
        velocity: torch.Tensor = self._dit.blocks_forward_chunk(
            x, t, None, cnn, att, cnn_out, att_out
        )
        return velocity
