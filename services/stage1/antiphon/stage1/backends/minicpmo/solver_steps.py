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

# Shapes whose step is kept (each holds one step's caches for its rows).
KEPT = 4


class SolverSteps:
    """The steps of one DiT, one per shape of its inputs, the last KEPT used."""

    def __init__(self, dit: Any, *, capture: bool) -> None:
        self._dit = dit
        self._capture = capture
        self._steps: OrderedDict[tuple[Any, ...], _Step] = OrderedDict()

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
            step = _Step(self._dit, inputs, outputs, capture=self._capture)
            while len(self._steps) >= KEPT:
                self._steps.popitem(last=False)
        self._steps[key] = step
        return step(inputs, outputs)


class _Step:
    """One shape's step: its inputs copied in, the DiT run (or its graph
    replayed), the caches it wrote copied out."""

    def __init__(
        self,
        dit: Any,
        inputs: Sequence[torch.Tensor],
        outputs: Sequence[torch.Tensor],
        *,
        capture: bool,
    ) -> None:
        import torch

        self._dit = dit
        self._inputs = [torch.empty_like(a) for a in inputs]
        self._outputs = [torch.empty_like(a) for a in outputs]
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
