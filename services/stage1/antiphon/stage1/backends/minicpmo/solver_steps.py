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
from typing import TYPE_CHECKING, Any

from antiphon.stage1.backends.minicpmo.cuda_graphs import capture

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
        key = (*(tuple(a.shape) for a in (x, t, cnn, att, att_out)), att.dtype)
        step = self._steps.pop(key, None)
        if step is None:
            step = _Step(self._dit, x, t, cnn, att, att_out, capture=self._capture)
            while len(self._steps) >= KEPT:
                self._steps.popitem(last=False)
        self._steps[key] = step
        return step(x, t, cnn, att, cnn_out, att_out)


class _Step:
    def __init__(
        self,
        dit: Any,
        x: torch.Tensor,
        t: torch.Tensor,
        cnn: torch.Tensor,
        att: torch.Tensor,
        att_out: torch.Tensor,
        *,
        capture: bool,
    ) -> None:
        import torch

        self._dit = dit
        self._x = torch.empty_like(x)
        self._t = torch.empty_like(t)
        self._cnn = torch.empty_like(cnn)
        self._att = torch.empty_like(att)
        self._cnn_out = torch.empty_like(cnn)
        self._att_out = torch.empty_like(att_out)
        self._capture = capture
        self._graph: Any = None
        self._velocity: torch.Tensor | None = None

    def __call__(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        cnn: torch.Tensor,
        att: torch.Tensor,
        cnn_out: torch.Tensor,
        att_out: torch.Tensor,
    ) -> torch.Tensor:
        self._x.copy_(x)
        self._t.copy_(t)
        self._cnn.copy_(cnn)
        self._att.copy_(att)
        if not self._capture:
            velocity = self._run()
        elif self._graph is None:
            velocity, self._graph, self._velocity = capture(self._run)
        else:
            self._graph.replay()
            assert self._velocity is not None
            velocity = self._velocity.clone()
        cnn_out.copy_(self._cnn_out)
        att_out.copy_(self._att_out)
        return velocity

    def _run(self) -> torch.Tensor:
        velocity: torch.Tensor = self._dit.blocks_forward_chunk(
            self._x, self._t, None, self._cnn, self._att, self._cnn_out, self._att_out
        )
        return velocity
