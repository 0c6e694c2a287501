"""An ONNX graph run with torch operators, on whatever device torch has.

Piper voices and Smart Turn ship as ONNX files, and onnxruntime's GPU build
needs CUDA libraries that a torch image does not carry. Their graphs are
plain feed-forward (no loops or branches) over some fifty standard
operators, so each node maps to one or two torch calls, and the graph runs
wherever torch does, batched. Only the GPU workers (stage0, stage1) import it.

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

from antiphon.common.onnx.ops import HOST_INPUTS, OPS, Op, Tensor, constant_of_shape, split


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


def _every_index(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
    """NonZero of a mask with every element set: its shape's indices, on the CPU."""
    mask = xs[0]
    assert mask is not None
    return [torch.ones(mask.shape, dtype=torch.bool).nonzero().T]


def _per_element(mask: Tensor, data: Tensor) -> tuple[Tensor, torch.Size]:
    """`mask` as a boolean that broadcasts over `data` (whose leading
    dimensions are the mask's), and the dimensions of `data` past them."""
    trailing = data.shape[mask.dim() :]
    return mask.bool().reshape(*mask.shape, *([1] * len(trailing))), trailing


def _gather_selected(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
    """GatherND of every element of a mask's shape: `data` where the mask is
    set, zero elsewhere (inside the spline's interval: its arithmetic on
    an element not selected stays in range, its bins' indices too)."""
    data, mask = xs[0], xs[1]
    assert data is not None and mask is not None
    keep, trailing = _per_element(mask, data)
    kept = torch.where(keep, data, torch.zeros((), dtype=data.dtype, device=data.device))
    return [kept.reshape(-1, *trailing)]


def _scatter_selected(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
    """ScatterND of one update per element of a mask's shape, in order: the
    update where the mask is set, `data` elsewhere."""
    data, updates, mask = xs[0], xs[1], xs[2]
    assert data is not None and updates is not None and mask is not None
    keep, trailing = _per_element(mask, data)
    return [torch.where(keep, updates.reshape(*mask.shape, *trailing), data)]


def _select_densely(nodes: list[_Node]) -> None:
    """Piper's spline (in its duration predictor) works on the elements inside
    its interval: NonZero of a mask, GatherND of those, the arithmetic, and
    ScatterND back. NonZero's length is known only on the device (a wait per
    use, and no CUDA graph can hold it), so here every selection takes every
    element, those not selected as zero, the arithmetic runs on all, and the
    ScatterND keeps the results where the mask is set: the same values, in
    shapes the host knows."""
    readers: dict[str, list[tuple[_Node, int]]] = {}
    for node in nodes:
        for slot, name in enumerate(node.inputs):
            readers.setdefault(name, []).append((node, slot))
    for node in nodes:
        if node.op_type != "NonZero":
            continue
        selections = readers.get(node.outputs[0], [])
        if not all(
            r.op_type == "Transpose" and list(r.attrs.get("perm", [])) == [1, 0]
            for r, _slot in selections
        ):
            continue
        users = [u for r, _slot in selections for u in readers.get(r.outputs[0], [])]
        if not all(
            (u.op_type in ("GatherND", "ScatterND") and slot == 1 and not u.attrs.get("batch_dims"))
            or u.op_type == "Shape"
            for u, slot in users
        ):
            continue
        mask = node.inputs[0]
        # Its Shape readers still see [elements, rank]; nothing else reads it.
        node.op = _every_index
        for user, _slot in users:
            if user.op_type == "GatherND":
                user.op, user.inputs = _gather_selected, [user.inputs[0], mask]
            elif user.op_type == "ScatterND":
                user.op = _scatter_selected
                user.inputs = [user.inputs[0], user.inputs[2], mask]


def _fold_weights(nodes: list[_Node], constants: dict[str, Tensor]) -> list[_Node]:
    """A quantized model's weights dequantized once, at load: each
    DequantizeLinear of constants runs here, its output joins `constants`
    (on the CPU, placed with the rest), and the node leaves the graph."""
    kept = []
    for node in nodes:
        if node.op_type == "DequantizeLinear" and all(
            not name or name in constants for name in node.inputs
        ):
            xs: list[Tensor | None] = [constants[name] if name else None for name in node.inputs]
            (constants[node.outputs[0]],) = node.op(xs, node.attrs)
        else:
            kept.append(node)
    return kept


def _fake_quantize(nodes: list[_Node], constants: dict[str, Tensor], outputs: list[str]) -> None:
    """A QDQ model's activations, each quantized and at once dequantized (a
    QuantizeLinear read only by its DequantizeLinear, one scale and zero
    point for the tensor), as one rounding step in float: four in-place
    passes where the pair took eight, and no integer tensor in between.
    (torch's fake_quantize also computes a mask for the gradient: on a CPU
    it was slower than the eight.)"""
    readers: dict[str, int] = dict.fromkeys(outputs, 1)
    for node in nodes:
        for name in node.inputs:
            readers[name] = readers.get(name, 0) + 1
    quantizers = {n.outputs[0]: n for n in nodes if n.op_type == "QuantizeLinear"}
    for node in list(nodes):
        q = quantizers.get(node.inputs[0]) if node.op_type == "DequantizeLinear" else None
        if q is None or readers[q.outputs[0]] != 1 or q.inputs[1:] != node.inputs[1:]:
            continue
        if len(q.inputs) < 3 or not all(name in constants for name in q.inputs[1:]):
            continue
        scale, zero = constants[q.inputs[1]], constants[q.inputs[2]]
        if scale.numel() != 1 or zero.numel() != 1:
            continue
        info = torch.iinfo(zero.dtype)
        q.op = _fake_quantizer(float(scale), int(zero), info.min, info.max)
        q.inputs, q.outputs = q.inputs[:1], node.outputs
        nodes.remove(node)


def _fake_quantizer(scale: float, zero: int, low: int, high: int) -> Op:
    """(clamp(round(x / scale) + zero, low, high) - zero) * scale, as ONNX
    computes the pair, with the zero point taken into the bounds."""

    def run(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
        x = xs[0]
        assert x is not None
        y = x / scale
        y.round_().clamp_(low - zero, high - zero).mul_(scale)
        return [y]

    return run


def _host_reads(nodes: list[_Node], fed: set[str]) -> list[str]:
    """The values computed from what is fed that a node needs as a host
    number (a Range's limit, a Reshape's shape), in the order first needed.
    Each is a wait for the device; after it the value is a plain number (a
    shape computed from a Shape is one from the start)."""
    data = set(fed)  # values whose contents come from the feeds
    reads: list[str] = []
    for node in nodes:
        if node.op_type == "Shape":
            continue
        for i in sorted(node.host_inputs):
            if i < len(node.inputs) and node.inputs[i] in data:
                reads.append(node.inputs[i])
                data.discard(node.inputs[i])
        if any(name in data for name in node.inputs):
            data.update(node.outputs)
    return reads


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
        host = {
            init.name: torch.from_numpy(numpy_helper.to_array(init).copy())
            for init in graph.initializer
        }
        nodes = _fold_weights([_Node(n, self.device) for n in graph.node], host)
        _fake_quantize(nodes, host, [o.name for o in graph.output])
        self._constants = {name: self._placed(value) for name, value in host.items()}
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
        self._nodes = nodes
        _select_densely(self._nodes)
        # Constants a node reads as numbers (a Pad's fill, a Clip's bounds),
        # kept on the CPU too: reading the device's copy would wait for it.
        read = {
            n for node in self._nodes for i, n in enumerate(node.inputs) if i in node.host_inputs
        }
        self._host_constants = {
            name: value.cpu()
            for name, value in self._constants.items()
            if name in read and value.device.type != "cpu"
        }
        self.input_names = [i.name for i in graph.input if i.name not in self._constants]
        self.output_names = [o.name for o in graph.output]
        self.host_reads = _host_reads(self._nodes, set(self.input_names))
        # Each value's last reader, so that intermediates are freed as soon as
        # they are spent (a batch's decoder activations are large on a GPU).
        self._last_use: dict[str, int] = {}
        for index, node in enumerate(self._nodes):
            for name in node.inputs:
                self._last_use[name] = index

    @property
    def half(self) -> bool:
        return self._half

    @torch.inference_mode()
    def run(self, feeds: Mapping[str, np.ndarray | Tensor]) -> list[Tensor]:
        """The graph's outputs for `feeds` (by input name), as tensors on the device."""
        with torch.autocast(self.device.type, dtype=torch.float16, enabled=self._half):
            values, moved = self.start(feeds), self.new_moved()
            self.run_nodes(values, moved, 0, len(self._nodes))
            return [values[name] for name in self.output_names]

    def start(self, feeds: Mapping[str, np.ndarray | Tensor]) -> dict[str, Tensor]:
        """The values a run begins with: the constants, and `feeds` placed."""
        values: dict[str, Tensor] = dict(self._constants)
        for name, value in feeds.items():
            tensor = value if isinstance(value, Tensor) else torch.from_numpy(np.asarray(value))
            values[name] = self._placed(tensor)
        return values

    def new_moved(self) -> dict[str, Tensor]:
        """Device copies of values computed on the CPU, made once per run; the
        constants' are made once at load."""
        return dict(self._device_constants)

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    def index_after(self, value: str) -> int:
        """The index of the node after the one that computes `value`."""
        for index, node in enumerate(self._nodes):
            if value in node.outputs:
                return index + 1
        raise KeyError(value)

    def run_nodes(
        self,
        values: dict[str, Tensor],
        moved: dict[str, Tensor],
        start: int,
        stop: int,
        *,
        pinned: list[Tensor] | None = None,
    ) -> None:
        """Nodes `start` to `stop` over `values` (and `moved`), in place: each
        value is dropped once its last reader ran. With `pinned`, a CPU value
        goes to the device through pinned memory kept there (what a CUDA
        graph's capture can record: its replay copies from that buffer)."""
        keep = set(self.output_names)
        for index in range(start, stop):
            node = self._nodes[index]
            xs = [
                None
                if not name
                else self._host_constants.get(name, values[name])
                if slot in node.host_inputs
                else values[name]
                for slot, name in enumerate(node.inputs)
            ]
            if self.device.type != "cpu" and any(t is not None and t.is_cuda for t in xs):
                xs = [
                    self._moved(name, t, moved, pinned)
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

    def _placed(self, value: Tensor) -> Tensor:
        """Floating-point values on the device; integers (ids, lengths, shape
        arithmetic) where they are, moved only when a device value meets them."""
        return value.to(self.device) if value.dtype.is_floating_point else value

    def _moved(
        self, name: str, value: Tensor, moved: dict[str, Tensor], pinned: list[Tensor] | None
    ) -> Tensor:
        """`value` (named `name`) on the device, copied there at most once a run.

        Each blocking copy would wait for the device to finish all it was
        given: an unpinned host tensor is staged at once, so the copy need not
        block."""
        if name not in moved:
            if pinned is not None:
                value = value.pin_memory()
                pinned.append(value)
            moved[name] = value.to(self.device, non_blocking=True)
        return moved[name]
