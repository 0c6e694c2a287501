"""The ONNX operators a Piper voice and Smart Turn use, each as one or two
torch calls (torch_graph.py runs a graph of them).

Each takes its node's input tensors (None where an optional input is left
out) and attributes, and returns its outputs. Only the attributes the shipped
graphs use are implemented; others fail loudly (NotImplementedError).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnx
import torch
import torch.nn.functional as F

Tensor = torch.Tensor
# One node: its input tensors (None where an optional input is left out) and
# its attributes; its outputs.
Op = Callable[[list[Tensor | None], dict[str, Any]], Sequence[Tensor]]

DTYPES: dict[int, torch.dtype] = {
    onnx.TensorProto.FLOAT: torch.float32,
    onnx.TensorProto.FLOAT16: torch.float16,
    onnx.TensorProto.DOUBLE: torch.float64,
    onnx.TensorProto.INT64: torch.int64,
    onnx.TensorProto.INT32: torch.int32,
    onnx.TensorProto.INT8: torch.int8,
    onnx.TensorProto.UINT8: torch.uint8,
    onnx.TensorProto.BOOL: torch.bool,
}


def _ints(t: Tensor | None) -> list[int]:
    return [] if t is None else [int(v) for v in t.reshape(-1).tolist()]


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _unary(fn: Callable[[Tensor], Tensor]) -> Op:
    return lambda xs, _a: [fn(_req(xs[0]))]


def _binary(fn: Callable[[Tensor, Tensor], Tensor]) -> Op:
    return lambda xs, _a: [fn(_req(xs[0]), _req(xs[1]))]


def _req(t: Tensor | None) -> Tensor:
    if t is None:
        raise ValueError("a required input is missing")
    return t


def _div(a: Tensor, b: Tensor) -> Tensor:
    # ONNX divides integers with truncation, as C does.
    if a.dtype.is_floating_point:
        return a / b
    return torch.div(a, b, rounding_mode="trunc")


def _cast(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    return [_req(xs[0]).to(DTYPES[a["to"]])]


def _shape(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    dims = list(_req(xs[0]).shape)
    return [torch.tensor(dims[a.get("start", 0) : a.get("end", len(dims))], dtype=torch.int64)]


def _reshape(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    x = _req(xs[0])
    shape = _ints(xs[1])
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x.reshape(shape)]


def _unsqueeze(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
    x = _req(xs[0])
    rank = x.dim() + len(_ints(xs[1]))
    for axis in sorted(_axis(v, rank) for v in _ints(xs[1])):
        x = x.unsqueeze(axis)
    return [x]


def _squeeze(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
    x = _req(xs[0])
    axes = _ints(xs[1]) if len(xs) > 1 else []
    if not axes:
        return [x.squeeze()]
    for axis in sorted((_axis(v, x.dim()) for v in axes), reverse=True):
        x = x.squeeze(axis)
    return [x]


def _gather(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    data, indices = _req(xs[0]), _req(xs[1])
    axis = _axis(a.get("axis", 0), data.dim())
    indices = indices.to(data.device)
    flat = torch.where(indices < 0, indices + data.shape[axis], indices).reshape(-1)
    out = torch.index_select(data, axis, flat)
    shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :])
    return [out.reshape(shape)]


def _gather_elements(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    data, indices = _req(xs[0]), _req(xs[1])
    axis = _axis(a.get("axis", 0), data.dim())
    indices = torch.where(indices < 0, indices + data.shape[axis], indices)
    return [torch.gather(data, axis, indices)]


def _gather_nd(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    if a.get("batch_dims", 0):
        raise NotImplementedError("GatherND with batch_dims")
    data, indices = _req(xs[0]), _req(xs[1])
    return [data[tuple(indices[..., i] for i in range(indices.shape[-1]))]]


def _scatter_nd(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    if a.get("reduction", "none") not in ("none", b"none"):
        raise NotImplementedError("ScatterND with a reduction")
    data, indices, updates = _req(xs[0]), _req(xs[1]), _req(xs[2])
    out = data.clone()
    out[tuple(indices[..., i] for i in range(indices.shape[-1]))] = updates
    return [out]


def _transpose(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    x = _req(xs[0])
    return [x.permute(a.get("perm", list(reversed(range(x.dim())))))]


def _concat(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    parts = [t for t in xs if t is not None]
    return [torch.cat(parts, dim=a["axis"])]


def _slice(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
    x = _req(xs[0])
    starts, ends = _ints(xs[1]), _ints(xs[2])
    axes = _ints(xs[3]) if len(xs) > 3 and xs[3] is not None else list(range(len(starts)))
    steps = _ints(xs[4]) if len(xs) > 4 and xs[4] is not None else [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = _axis(axis, x.dim())
        size = x.shape[axis]
        start, end = (v + size if v < 0 else v for v in (start, end))
        if step > 0:
            index: list[slice] = [slice(None)] * x.dim()
            index[axis] = slice(min(max(start, 0), size), min(max(end, 0), size), step)
            x = x[tuple(index)]
        else:
            # torch slices only forwards: pick the elements by index instead.
            # Made where x is: a copy from the host could not be in a CUDA graph.
            picks = torch.arange(
                min(max(start, -1), size - 1),
                min(max(end, -1), size - 1),
                step,
                dtype=torch.int64,
                device=x.device,
            )
            x = torch.index_select(x, axis, picks)
    return [x]


def _expand(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
    x = _req(xs[0])
    # Expand broadcasts both ways: a 1 in `shape` keeps x's dimension.
    target = _ints(xs[1])
    rank = max(x.dim(), len(target))
    dims = [1] * (rank - x.dim()) + list(x.shape)
    target = [1] * (rank - len(target)) + target
    return [
        x.reshape(dims).expand(
            [max(d, t) if 1 in (d, t) else d for d, t in zip(dims, target, strict=True)]
        )
    ]


def constant_of_shape(
    xs: list[Tensor | None], a: dict[str, Any], device: torch.device
) -> list[Tensor]:
    value = a.get("value")
    fill = value if value is not None else torch.zeros(1, dtype=torch.float32)
    # Made where it is used: a float fill is data (a padding the size of an
    # activation, slow to copy over), an integer one shape arithmetic.
    where = device if fill.dtype.is_floating_point else torch.device("cpu")
    return [torch.full(_ints(xs[0]), fill.reshape(-1)[0].item(), dtype=fill.dtype, device=where)]


def _range(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
    start, limit, delta = (_req(t) for t in xs[:3])
    return [torch.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)]


def _conv(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    x, w, b = _req(xs[0]), _req(xs[1]), xs[2] if len(xs) > 2 else None
    spatial = w.dim() - 2
    pads = a.get("pads", [0] * 2 * spatial)
    begin, end = pads[:spatial], pads[spatial:]
    padding: list[int] | int = begin
    if begin != end:
        # F.pad lists the last dimension first.
        x = F.pad(x, [p for d in reversed(range(spatial)) for p in (begin[d], end[d])])
        padding = 0
    conv = F.conv1d if spatial == 1 else F.conv2d
    return [
        conv(
            x,
            w,
            b,
            stride=a.get("strides", 1),
            padding=padding,
            dilation=a.get("dilations", 1),
            groups=a.get("group", 1),
        )
    ]


def _conv_transpose(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    x, w, b = _req(xs[0]), _req(xs[1]), xs[2] if len(xs) > 2 else None
    spatial = w.dim() - 2
    pads = a.get("pads", [0] * 2 * spatial)
    if pads[:spatial] != pads[spatial:] or "output_shape" in a:
        raise NotImplementedError("ConvTranspose with uneven pads or an output_shape")
    conv = F.conv_transpose1d if spatial == 1 else F.conv_transpose2d
    return [
        conv(
            x,
            w,
            b,
            stride=a.get("strides", 1),
            padding=pads[:spatial],
            output_padding=a.get("output_padding", 0),
            groups=a.get("group", 1),
            dilation=a.get("dilations", 1),
        )
    ]


def _reduce(fn: Callable[..., Tensor], axes_as_input: bool) -> Op:
    def run(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
        x = _req(xs[0])
        axes = _ints(xs[1]) if axes_as_input and len(xs) > 1 else list(a.get("axes", []))
        keep = bool(a.get("keepdims", 1))
        if not axes:
            if a.get("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(x.dim()))
        return [fn(x, dim=[_axis(v, x.dim()) for v in axes], keepdim=keep)]

    return run


def _amax(x: Tensor, dim: list[int], keepdim: bool) -> Tensor:
    return torch.amax(x, dim=dim, keepdim=keepdim)


def _pad(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    x = _req(xs[0])
    pads = _ints(xs[1])
    value = xs[2].item() if len(xs) > 2 and xs[2] is not None and xs[2].numel() else 0.0
    if len(xs) > 3 and xs[3] is not None:
        raise NotImplementedError("Pad with axes")
    rank = x.dim()
    torch_pads = [p for d in reversed(range(rank)) for p in (pads[d], pads[d + rank])]
    # Trailing all-zero pairs are leading dimensions: F.pad needs only the rest.
    while len(torch_pads) > 2 and torch_pads[-2:] == [0, 0]:
        torch_pads = torch_pads[:-2]
    mode = a.get("mode", "constant")
    if mode == "constant":
        return [F.pad(x, torch_pads, value=value)]
    return [F.pad(x, torch_pads, mode={"edge": "replicate"}.get(mode, mode))]


def _softmax(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    return [torch.softmax(_req(xs[0]), dim=a.get("axis", -1))]


def split(xs: list[Tensor | None], a: dict[str, Any], outputs: int) -> list[Tensor]:
    x = _req(xs[0])
    axis = a.get("axis", 0)
    sizes = _ints(xs[1]) if len(xs) > 1 and xs[1] is not None else a.get("split")
    if not sizes:
        sizes = [x.shape[axis] // outputs] * outputs
    return list(torch.split(x, sizes, dim=axis))


def _cumsum(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    x, axis = _req(xs[0]), _axis(_ints(xs[1])[0], _req(xs[0]).dim())
    if a.get("reverse", 0):
        x = x.flip(axis)
    out = torch.cumsum(x, dim=axis)
    if a.get("exclusive", 0):
        out = out - x
    return [out.flip(axis) if a.get("reverse", 0) else out]


def _along(param: Tensor, x: Tensor, axis: int) -> Tensor:
    """A quantization scale or zero point, shaped to broadcast over `x`: a
    scalar as it is, a per-axis vector along `axis`."""
    if param.dim() == 0 or param.dim() == x.dim():
        return param
    shape = [1] * x.dim()
    shape[_axis(axis, x.dim())] = param.numel()
    return param.reshape(shape)


def _quantize_linear(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    # round() is half to even, as ONNX says; the zero point's type is the output's.
    x, scale, zero = _req(xs[0]), _req(xs[1]), xs[2]
    dtype = torch.uint8 if zero is None else zero.dtype
    axis = a.get("axis", 1)
    q = torch.round(x / _along(scale, x, axis))
    if zero is not None:
        q = q + _along(zero, x, axis)
    info = torch.iinfo(dtype)
    return [q.clamp(info.min, info.max).to(dtype)]


def _dequantize_linear(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    x, scale, zero = _req(xs[0]), _req(xs[1]), xs[2]
    axis = a.get("axis", 1)
    out = x.to(scale.dtype)
    if zero is not None:
        out = out - _along(zero, x, axis).to(scale.dtype)
    return [out * _along(scale, x, axis)]


def _layer_normalization(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    x = _req(xs[0])
    if a.get("stash_type", 1) != 1:
        raise NotImplementedError("LayerNormalization with stash_type other than float")
    shape = x.shape[_axis(a.get("axis", -1), x.dim()) :]
    return [F.layer_norm(x, shape, xs[1], xs[2], a.get("epsilon", 1e-5))]


def _gemm(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    left, right, bias = _req(xs[0]), _req(xs[1]), xs[2] if len(xs) > 2 else None
    if a.get("transA", 0):
        left = left.T
    if a.get("transB", 0):
        right = right.T
    out = (left @ right) * a.get("alpha", 1.0)
    if bias is not None:
        out = out + bias * a.get("beta", 1.0)
    return [out]


def _random_normal_like(xs: list[Tensor | None], a: dict[str, Any]) -> list[Tensor]:
    x = _req(xs[0])
    dtype = DTYPES[a["dtype"]] if "dtype" in a else x.dtype
    noise = torch.randn(x.shape, dtype=dtype, device=x.device)
    return [noise * a.get("scale", 1.0) + a.get("mean", 0.0)]


def _clip(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
    low = xs[1].item() if len(xs) > 1 and xs[1] is not None else None
    high = xs[2].item() if len(xs) > 2 and xs[2] is not None else None
    return [torch.clamp(_req(xs[0]), low, high)]


def _where(xs: list[Tensor | None], _a: dict[str, Any]) -> list[Tensor]:
    return [torch.where(_req(xs[0]), _req(xs[1]), _req(xs[2]))]


OPS: dict[str, Op] = {
    "Add": _binary(torch.add),
    "Sub": _binary(torch.sub),
    "Mul": _binary(torch.mul),
    "Div": _binary(_div),
    "Pow": _binary(torch.pow),
    "MatMul": _binary(torch.matmul),
    "Equal": _binary(torch.eq),
    "Less": _binary(torch.lt),
    "LessOrEqual": _binary(torch.le),
    "GreaterOrEqual": _binary(torch.ge),
    "Greater": _binary(torch.gt),
    "And": _binary(torch.logical_and),
    "Not": _unary(torch.logical_not),
    "Neg": _unary(torch.neg),
    "Sqrt": _unary(torch.sqrt),
    "Exp": _unary(torch.exp),
    "Erf": _unary(torch.erf),
    "Tanh": _unary(torch.tanh),
    "Sigmoid": _unary(torch.sigmoid),
    "Relu": _unary(torch.relu),
    "Softplus": _unary(F.softplus),
    "Ceil": _unary(torch.ceil),
    "Identity": _unary(lambda x: x),
    "NonZero": _unary(lambda x: torch.nonzero(x).T),
    "LeakyRelu": lambda xs, a: [F.leaky_relu(_req(xs[0]), a.get("alpha", 0.01))],
    "Cast": _cast,
    "Shape": _shape,
    "Reshape": _reshape,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "ScatterND": _scatter_nd,
    "Transpose": _transpose,
    "Concat": _concat,
    "Slice": _slice,
    "Expand": _expand,
    "Range": _range,
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "ReduceMean": _reduce(torch.mean, axes_as_input=False),
    "ReduceMax": _reduce(_amax, axes_as_input=False),
    "ReduceSum": _reduce(torch.sum, axes_as_input=True),
    "Pad": _pad,
    "Softmax": _softmax,
    "CumSum": _cumsum,
    "RandomNormalLike": _random_normal_like,
    "Clip": _clip,
    "Where": _where,
    "QuantizeLinear": _quantize_linear,
    "DequantizeLinear": _dequantize_linear,
    "LayerNormalization": _layer_normalization,
    "Gemm": _gemm,
}


# Inputs each operator reads as Python numbers (shapes, axes, bounds), by
# position: never moved to the device, where reading them would wait for it.
HOST_INPUTS: dict[str, frozenset[int]] = {
    "Reshape": frozenset({1}),
    "Unsqueeze": frozenset({1}),
    "Squeeze": frozenset({1}),
    "Slice": frozenset({1, 2, 3, 4}),
    "Expand": frozenset({1}),
    "Pad": frozenset({1, 2, 3}),
    "ReduceSum": frozenset({1}),
    "Split": frozenset({1}),
    "CumSum": frozenset({1}),
    "Clip": frozenset({1, 2}),
    "Range": frozenset({0, 1, 2}),
    "ConstantOfShape": frozenset({0}),
}
