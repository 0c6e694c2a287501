"""An ONNX graph run with torch operators, on whatever device torch has.

Piper voices ship as ONNX files, and onnxruntime's GPU build needs CUDA
libraries that a torch image does not carry. A voice's graph is plain
feed-forward (no loops or branches) over some fifty standard operators, so
each node maps to one or two torch calls, and the graph runs wherever torch
does, batched.

Shape arithmetic (Shape, the Gathers and Concats over its result) stays on the
CPU: those values become Python ints for Reshape, Slice and the like, and
keeping them off the GPU saves a device round trip per node. Floating-point
weights go to the device once, at load.

Only the operators and attributes the shipped voices use are implemented;
loading a graph with any other operator fails at once, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from antiphon.stage1.onnx_ops import HOST_INPUTS, OPS, Op, Tensor, constant_of_shape, split


def _attribute(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        return torch.from_numpy(numpy_helper.to_array(value).copy())
    if isinstance(value, bytes):
        return value.decode()
    return value


class _Node:
    __slots__ = ("attrs", "host_inputs", "inputs", "op", "op_type", "outputs")

    def __init__(self, node: onnx.NodeProto, device: torch.device) -> None:
        self.op_type = node.op_type
        self.inputs = list(node.input)
        self.host_inputs = HOST_INPUTS.get(node.op_type, frozenset())
        self.outputs = list(node.output)
        self.attrs = {a.name: _attribute(a) for a in node.attribute}
        if node.op_type == "Split":
            count = len(node.output)
            self.op: Op = lambda xs, a: split(xs, a, count)
        elif node.op_type == "ConstantOfShape":
            self.op = lambda xs, a: constant_of_shape(xs, a, device)
        elif node.op_type == "Constant":
            value = self.attrs["value"]
            self.op = lambda _xs, _a: [value]
        else:
            self.op = OPS[node.op_type]


class TorchGraph:
    """An ONNX model's graph as torch calls on `device`; `run` as onnxruntime's.

    `half`: convolutions and matrix products in float16 under torch's autocast
    (a GPU's tensor cores), everything else as the graph says."""

    def __init__(
        self, model: onnx.ModelProto | str | bytes, device: str = "cpu", *, half: bool = False
    ) -> None:
        if not isinstance(model, onnx.ModelProto):
            model = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
        graph = model.graph
        unknown = sorted(
            {n.op_type for n in graph.node} - set(OPS) - {"Split", "Constant", "ConstantOfShape"}
        )
        if unknown:
            raise NotImplementedError(f"ONNX operators not implemented: {', '.join(unknown)}")
        self.device = torch.device(device)
        self._half = half
        self._constants: dict[str, Tensor] = {}
        for init in graph.initializer:
            value = torch.from_numpy(numpy_helper.to_array(init).copy())
            self._constants[init.name] = self._placed(value)
        # The integer constants, on the device too, for the nodes that meet
        # them there (a mask's fill value, an axis compared with a device index).
        self._device_constants = (
            {}
            if self.device.type == "cpu"
            else {
                name: value.to(self.device)
                for name, value in self._constants.items()
                if not value.is_cuda
            }
        )
        self._nodes = [_Node(n, self.device) for n in graph.node]
        self.input_names = [i.name for i in graph.input if i.name not in self._constants]
        self.output_names = [o.name for o in graph.output]
        # Each value's last reader, so that intermediates are freed as soon as
        # they are spent (a batch's decoder activations are large on a GPU).
        self._last_use: dict[str, int] = {}
        for index, node in enumerate(self._nodes):
            for name in node.inputs:
                self._last_use[name] = index

    @torch.inference_mode()
    def run(self, feeds: Mapping[str, np.ndarray | Tensor]) -> list[Tensor]:
        """The graph's outputs for `feeds` (by input name), as tensors on the device."""
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self._half):
            return self._run(feeds)

    def _run(self, feeds: Mapping[str, np.ndarray | Tensor]) -> list[Tensor]:
        values: dict[str, Tensor] = dict(self._constants)
        for name, value in feeds.items():
            tensor = value if isinstance(value, Tensor) else torch.from_numpy(np.asarray(value))
            values[name] = self._placed(tensor)
        # Device copies of values computed on the CPU, made once per run; the
        # constants' are made once at load.
        moved = dict(self._device_constants)
        keep = set(self.output_names)
        for index, node in enumerate(self._nodes):
            xs = [values[name] if name else None for name in node.inputs]
            if self.device.type != "cpu" and any(t is not None and t.is_cuda for t in xs):
                xs = [
                    self._moved(name, t, moved)
                    if t is not None and not t.is_cuda and i not in node.host_inputs
                    else t
                    for i, (name, t) in enumerate(zip(node.inputs, xs, strict=True))
                ]
            outs = node.op(xs, node.attrs)
            for name, out in zip(node.outputs, outs, strict=False):
                values[name] = out
            for name in node.inputs:
                if self._last_use.get(name) == index and name not in keep:
                    if name not in self._constants:
                        values.pop(name, None)
                        moved.pop(name, None)
        return [values[name] for name in self.output_names]

    def _placed(self, value: Tensor) -> Tensor:
        """Floating-point values on the device; integers (ids, lengths, shape
        arithmetic) where they are, moved only when a device value meets them."""
        return value.to(self.device) if value.dtype.is_floating_point else value

    def _moved(self, name: str, value: Tensor, moved: dict[str, Tensor]) -> Tensor:
        """`value` (named `name`) on the device, copied there at most once a run.

        Each blocking copy would wait for the device to finish all it was
        given: an unpinned host tensor is staged at once, so the copy need not
        block."""
        if name not in moved:
            moved[name] = value.to(self.device, non_blocking=True)
        return moved[name]
