"""The ONNX graph in torch: operator by operator against onnxruntime, then the
shipped Piper voice whole (batched across threads: test_voice_batch.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper

from antiphon.common.onnx.torch_graph import TorchGraph
from tests.stage1.voicing import feeds
from tests.support import tiers

# Every case runs onnxruntime beside torch.
pytestmark = pytest.mark.models

FLOAT = TensorProto.FLOAT


def _graph(
    op: str,
    inputs: dict[str, np.ndarray],
    constants: dict[str, np.ndarray],
    outputs: int = 1,
    **attrs: Any,
) -> onnx.ModelProto:
    """One node over `inputs` (fed) and `constants` (initializers), in order."""
    names = [*inputs, *constants]
    node = helper.make_node(op, names, [f"y{i}" for i in range(outputs)], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in inputs.items()
        ],
        [helper.make_tensor_value_info(f"y{i}", FLOAT, None) for i in range(outputs)],
        [onnx.numpy_helper.from_array(v, n) for n, v in constants.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


rng = np.random.default_rng(3)
x34 = rng.standard_normal((3, 4)).astype(np.float32)
x235 = rng.standard_normal((2, 3, 5)).astype(np.float32)
ints = np.array
FAR = 10**9  # past either end: ONNX clamps it

# (operator, fed inputs, initializers, outputs, attributes): the edges that the
# voices reach (negative axes and steps, uneven pads, broadcasting both ways).
CASES: list[tuple[str, dict[str, np.ndarray], dict[str, np.ndarray], int, dict[str, object]]] = [
    ("Slice", {"x": x235}, {"s": ints([-1]), "e": ints([-FAR]), "a": ints([2]), "t": ints([-2])},
     1, {}),
    ("Slice", {"x": x235}, {"s": ints([1, 0]), "e": ints([FAR, -1]), "a": ints([1, -1])}, 1, {}),
    ("Expand", {"x": x34[:, :1]}, {"s": ints([2, 1, 4])}, 1, {}),
    ("Pad", {"x": x235}, {"p": ints([0, 0, 1, 0, 0, 2])}, 1, {}),
    ("Pad", {"x": x235}, {"p": ints([0, 1, 0, 0, 0, 0])}, 1, {"mode": "reflect"}),
    ("CumSum", {"x": x34}, {"a": ints(1)}, 1, {"exclusive": 1, "reverse": 1}),
    ("Gather", {"x": x235}, {"i": ints([[-1, 0]])}, 1, {"axis": 1}),
    ("GatherElements", {"x": x34}, {"i": ints([[1, 0, 2, 1]])}, 1, {"axis": 0}),
    ("GatherND", {"x": x235}, {"i": ints([[1, 2], [0, 0]])}, 1, {}),
    ("ScatterND", {"x": x34}, {"i": ints([[2], [0]]), "u": x34[:2] * 10}, 1, {}),
    ("ReduceSum", {"x": x235}, {"a": ints([-1])}, 1, {"keepdims": 0}),
    ("ReduceMean", {"x": x235}, {}, 1, {"axes": [1], "keepdims": 1}),
    ("Split", {"x": x235}, {"s": ints([2, 3])}, 2, {"axis": -1}),
    ("Unsqueeze", {"x": x34}, {"a": ints([0, -1])}, 1, {}),
    ("Reshape", {"x": x235}, {"s": ints([0, -1])}, 1, {}),
    ("ConstantOfShape", {"s": ints([2, 3])}, {}, 1,
     {"value": helper.make_tensor("v", FLOAT, [1], [0.5])}),
    ("Conv", {"x": x235}, {"w": rng.standard_normal((4, 3, 3)).astype(np.float32)}, 1,
     {"pads": [2, 0], "dilations": [1], "strides": [1]}),
    ("ConvTranspose", {"x": x235}, {"w": rng.standard_normal((3, 2, 4)).astype(np.float32)}, 1,
     {"pads": [1, 1], "strides": [2]}),
    # Smart Turn's (stage0 turn_torch.py).
    ("LayerNormalization", {"x": x235}, {"g": x235[0] + 1, "b": x235[1]}, 1,
     {"axis": -2, "epsilon": 1e-3}),
    ("Gemm", {"x": x34}, {"w": x34[:2] * 2, "c": x34[2, :2]}, 1,
     {"transB": 1, "alpha": 0.5, "beta": 2.0}),
]  # fmt: skip


@pytest.mark.parametrize(("op", "inputs", "constants", "outputs", "attrs"), CASES)
def test_an_operator_computes_what_onnxruntime_does(
    op: str,
    inputs: dict[str, np.ndarray],
    constants: dict[str, np.ndarray],
    outputs: int,
    attrs: dict[str, object],
) -> None:
    model = _graph(op, inputs, constants, outputs, **attrs)
    expected = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, inputs)
    got = TorchGraph(model).run(inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert tuple(g.shape) == e.shape
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("integers_read", [False, True], ids=["rounded-in-float", "as-integers"])
def test_a_quantized_graph_computes_what_onnxruntime_does_step_by_step(
    integers_read: bool,
) -> None:
    """Smart Turn's int8 steps: an activation quantized per tensor and back
    (ties round to even, out-of-range values saturate), times weights stored
    int8 per output column (dequantized once, at load). The pair is one
    rounding in float unless something else reads the integers."""
    x = np.array([[0.25, -0.25, 0.75, 90.0], [-90.0, 1.25, 0.5, -0.05]], np.float32)
    w = rng.integers(-127, 128, (4, 3)).astype(np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["y0"]),
    ]
    constants: dict[str, np.ndarray] = {
        "xs": np.array(0.5, np.float32),
        "xz": np.array(128, np.uint8),
        "w": w,
        "ws": np.array([0.01, 0.02, 0.03], np.float32),
        "wz": np.array([0, 3, -2], np.int8),
    }
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", FLOAT, x.shape)],
        [helper.make_tensor_value_info(n, FLOAT, None) for n in ("y0", "xd")]
        + ([helper.make_tensor_value_info("xq", TensorProto.UINT8, None)] if integers_read else []),
        [onnx.numpy_helper.from_array(v, n) for n, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    options = onnxruntime.SessionOptions()
    # Node by node, as the graph says (fused, onnxruntime requantizes its own way).
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    ).run(None, {"x": x})
    got = TorchGraph(model).run({"x": x})
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-6, atol=1e-6)
    # Halves round to even (0.25 / 0.5 to 0, 0.75 / 0.5 and 1.25 / 0.5 to 2);
    # +-90 saturate at 255 and 0.
    np.testing.assert_array_equal(got[1].numpy(), [[0, 0, 1, 63.5], [-64, 1, 0.5, 0]])
    if integers_read:
        assert got[2].dtype == torch.uint8
        np.testing.assert_array_equal(got[2].numpy(), [[128, 128, 130, 255], [0, 130, 129, 128]])


def test_an_operator_it_lacks_is_named_at_load() -> None:
    model = _graph("Det", {"x": x34[:3, :3]}, {})
    with pytest.raises(NotImplementedError, match="Det"):
        TorchGraph(model)


def test_the_voice_sounds_as_it_does_in_onnxruntime(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    import torch

    torch.set_num_threads(1)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    runtime = onnxruntime.InferenceSession(voice_model, options, providers=["CPUExecutionProvider"])
    inputs = feeds(sentences[1])
    audio, durations = runtime.run(None, inputs)
    got_audio, got_durations = (t.numpy() for t in TorchGraph(voice_model).run(inputs))
    assert got_audio.shape == audio.shape
    assert np.abs(audio).max() > 0.05  # it speaks
    np.testing.assert_allclose(got_audio, audio, atol=1e-3)
    np.testing.assert_array_equal(got_durations, durations)


def test_piper_on_the_torch_engine_says_what_onnxruntime_says(
    request: pytest.FixtureRequest,
) -> None:
    """The whole voice, text in: same chunks, texts and marks either way."""
    tiers.require(request, tiers.MODELS, "loads the Piper voice")
    from antiphon.stage1.backends.piper.assets import locate
    from antiphon.stage1.backends.piper.tts import Batched, PiperTts

    assets = locate()
    sizes: list[int] = []
    make: Callable[..., PiperTts] = lambda **kw: PiperTts(  # noqa: E731
        assets.voice_onnx, assets.voice_config, out_rate=24000, varied=False, **kw
    )
    runtime, torch_voice = make(), make(batched=Batched("cpu", 4, sizes.append))
    text = "Sure. The store opens at nine, and it closes at five."
    try:
        want = list(runtime.synthesize(text))
        got = list(torch_voice.synthesize(text))
    finally:
        torch_voice.close()
    assert [c.text for c in got] == [c.text for c in want]
    assert [c.marks for c in got] == [c.marks for c in want]
    for g, w in zip(got, want, strict=True):
        a = np.frombuffer(g.pcm16, np.int16).astype(np.int32)
        b = np.frombuffer(w.pcm16, np.int16).astype(np.int32)
        assert len(a) == len(b)
        assert np.abs(a - b).max() <= 64  # within a few PCM16 steps of rounding
    assert sizes and sum(sizes) == len(want)
