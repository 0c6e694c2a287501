"""The ONNX graph in torch: operator by operator against onnxruntime, then the
shipped Piper voice whole, alone and batched across threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper

from antiphon.common.onnx_torch import TorchGraph
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


# --- the shipped voice ------------------------------------------------------


@pytest.fixture(scope="module")
def voice_model(request: pytest.FixtureRequest) -> bytes:
    tiers.require(request, tiers.MODELS, "loads the Piper voice")
    from piper.patch_voice_with_alignment import add_alignment_output

    from antiphon.stage1.assets import locate

    model = onnx.load(str(locate().voice_onnx))
    add_alignment_output(model)
    return model.SerializeToString()


@pytest.fixture(scope="module")
def sentences() -> list[list[int]]:
    """Phoneme ids of real sentences of different lengths (each ends in silence,
    as Piper's do: a padded neighbour's decoder then reaches no audible sample)."""
    from piper import PiperVoice

    from antiphon.stage1.assets import locate

    voice = PiperVoice.load(locate().voice_onnx)
    text = "Sure. The store opens at nine, and it closes at five. Goodbye! Is there more?"
    return [voice.phonemes_to_ids(p) for p in voice.phonemize(text)]


def at_once(calls: int, call: Callable[[int], None]) -> None:
    """`call(0)` ... `call(calls - 1)`, each on a thread of its own, released
    together (as many sessions' synthesis threads call the voice), all joined."""
    start = threading.Barrier(calls)

    def run(i: int) -> None:
        start.wait()
        call(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)


def _feeds(ids: list[int]) -> dict[str, np.ndarray]:
    return {
        "input": np.array([ids], dtype=np.int64),
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        # No noise: the same ids give the same samples.
        "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),
    }


def test_the_voice_sounds_as_it_does_in_onnxruntime(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    import torch

    torch.set_num_threads(1)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    runtime = onnxruntime.InferenceSession(voice_model, options, providers=["CPUExecutionProvider"])
    feeds = _feeds(sentences[1])
    audio, durations = runtime.run(None, feeds)
    got_audio, got_durations = (t.numpy() for t in TorchGraph(voice_model).run(feeds))
    assert got_audio.shape == audio.shape
    assert np.abs(audio).max() > 0.05  # it speaks
    np.testing.assert_allclose(got_audio, audio, atol=1e-3)
    np.testing.assert_array_equal(got_durations, durations)


def test_sentences_voiced_together_sound_as_each_does_alone(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.voice_batch import BatchedVoiceGraph

    assert len({len(s) for s in sentences}) == 4
    alone = TorchGraph(voice_model)
    sizes: list[int] = []
    waits: list[float] = []
    runs: list[float] = []
    batched = BatchedVoiceGraph(
        TorchGraph(voice_model),
        hop=256,
        max_batch=8,
        observe_batch=sizes.append,
        observe_wait=waits.append,
        observe_run=runs.append,
    )
    results: dict[int, list[np.ndarray]] = {}

    def voice(i: int) -> None:
        results[i] = batched.run(None, _feeds(sentences[i % len(sentences)]))

    at_once(len(sentences) * 2, voice)
    batched.close()
    assert max(sizes) > 1, sizes  # they did share a batch
    assert sum(sizes) == len(sentences) * 2 == len(results)
    assert len(waits) == sum(sizes) and len(runs) == len(sizes)  # per sentence, per batch
    for i, (audio, durations) in results.items():
        want_audio, want_durations = (
            t.numpy() for t in alone.run(_feeds(sentences[i % len(sentences)]))
        )
        assert audio.shape == want_audio.shape, i
        np.testing.assert_allclose(audio, want_audio, atol=1e-3)
        np.testing.assert_array_equal(durations, want_durations)


class Slow(TorchGraph):
    """The voice's graph taking at least `seconds` a batch (a busy shared card)."""

    def __init__(self, model: bytes, seconds: float) -> None:
        super().__init__(model)
        self.seconds = seconds
        self.running = threading.Event()

    def run(self, feeds: Any) -> list[Any]:
        self.running.set()
        time.sleep(self.seconds)
        return super().run(feeds)


def test_a_sentence_behind_a_batch_waits_its_run_and_both_are_observed(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.voice_batch import BatchedVoiceGraph

    graph = Slow(voice_model, seconds=0.3)
    waits: list[float] = []
    runs: list[float] = []
    batched = BatchedVoiceGraph(
        graph, hop=256, max_batch=8, observe_wait=waits.append, observe_run=runs.append
    )
    first = threading.Thread(target=batched.run, args=(None, _feeds(sentences[0])))
    first.start()
    assert graph.running.wait(10)
    batched.run(None, _feeds(sentences[1]))  # arrives while the first batch runs
    first.join(10)
    batched.close()
    assert len(runs) == 2 and min(runs) >= 0.3, runs
    assert waits[0] < 0.1 and 0.15 < waits[1] < runs[0] + 0.1, (waits, runs)


class ScarceMemory(TorchGraph):
    """The voice's graph on a device that holds at most `rows` sentences at once,
    and no sentence longer than `longest` phonemes even alone: more runs out of
    memory, as on a GPU shared with an LLM's cache."""

    def __init__(self, model: bytes, rows: int, longest: int = 10**6) -> None:
        super().__init__(model)
        self.rows, self.longest = rows, longest
        self.tried: list[int] = []

    def run(self, feeds: Any) -> list[Any]:
        self.tried.append(len(feeds["input"]))
        if len(feeds["input"]) > self.rows or feeds["input"].shape[1] > self.longest:
            raise torch.OutOfMemoryError("CUDA out of memory (scarce, for the test)")
        return super().run(feeds)


def test_a_batch_too_large_for_the_device_is_voiced_in_halves(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.voice_batch import BatchedVoiceGraph

    graph = ScarceMemory(voice_model, rows=1)
    batched = BatchedVoiceGraph(graph, hop=256, max_batch=8)
    results: dict[int, list[np.ndarray]] = {}

    def voice(i: int) -> None:
        results[i] = batched.run(None, _feeds(sentences[i]))

    at_once(len(sentences), voice)
    batched.close()
    assert max(graph.tried) > 1  # a batch was tried whole, then split
    alone = TorchGraph(voice_model)
    for i, (audio, _durations) in results.items():
        np.testing.assert_allclose(audio, alone.run(_feeds(sentences[i]))[0].numpy(), atol=1e-3)
    assert len(results) == len(sentences)  # every caller was voiced, none failed


def test_only_a_sentence_the_device_cannot_hold_alone_fails(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.voice_batch import BatchedVoiceGraph

    longest = max(map(len, sentences))
    graph = ScarceMemory(voice_model, rows=2, longest=longest - 1)
    batched = BatchedVoiceGraph(graph, hop=256, max_batch=8)
    outcomes: dict[int, str] = {}

    def voice(i: int) -> None:
        try:
            batched.run(None, _feeds(sentences[i]))
            outcomes[i] = "voiced"
        except torch.OutOfMemoryError:
            outcomes[i] = "out of memory"

    at_once(len(sentences), voice)
    batched.close()
    assert outcomes == {
        i: "out of memory" if len(s) == longest else "voiced" for i, s in enumerate(sentences)
    }


class Held(TorchGraph):
    """The voice's graph, recording each batch's sentence lengths; a batch with
    a sentence of `held_from` phonemes or more waits until `release` (a long
    sentence run node by node, which takes a while on a shared card)."""

    def __init__(self, model: bytes, held_from: int) -> None:
        super().__init__(model)
        self.held_from = held_from
        self.batches: list[list[int]] = []
        self.held = threading.Event()
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def run(self, feeds: Any) -> list[Any]:
        lengths = [int(n) for n in feeds["input_lengths"]]
        self.batches.append(lengths)
        if max(lengths) >= self.held_from:
            self.held.set()
            assert self._released.wait(timeout=30)
        return super().run(feeds)


def _in_threads(calls: list[Callable[[], object]]) -> list[threading.Thread]:
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    return threads


def test_a_first_clause_joins_a_batch_ahead_of_later_clauses(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.scheduler import voicing
    from antiphon.stage1.voice_batch import BatchedVoiceGraph

    longest, *others = sorted(sentences, key=len, reverse=True)
    graph = Held(voice_model, held_from=len(longest))
    batched = BatchedVoiceGraph(graph, hop=256, max_batch=1)

    def voice(ids: list[int], first: bool) -> Callable[[], object]:
        def call() -> object:
            with voicing(first=first):
                return batched.run(None, _feeds(ids))

        return call

    # The long sentence holds the batch thread while the rest queue up: two
    # later clauses, then a first clause.
    threads = _in_threads([voice(longest, first=False)])
    assert graph.held.wait(timeout=30)
    later, first = others[:2], others[2]
    for ids in later:
        threads += _in_threads([voice(ids, first=False)])
        time.sleep(0.05)  # arrival order among the later ones
    threads += _in_threads([voice(first, first=True)])
    time.sleep(0.2)
    graph.release()
    for thread in threads:
        thread.join(timeout=60)
    batched.close()
    assert graph.batches == [[len(longest)], [len(first)], *([len(ids)] for ids in later)]


def test_with_replayed_graphs_a_short_clause_never_waits_behind_a_long_one(
    voice_model: bytes, sentences: list[list[int]]
) -> None:
    from antiphon.stage1.voice_batch import BatchedVoiceGraph, Replayed

    longest, *short = sorted(sentences, key=len, reverse=True)
    graph = Held(voice_model, held_from=len(longest))
    batched = BatchedVoiceGraph(
        graph, hop=256, max_batch=8, replayed=Replayed(rows=2, phonemes=len(longest) - 1)
    )
    voiced: list[int] = []

    def voice(ids: list[int]) -> Callable[[], object]:
        def call() -> object:
            out = batched.run(None, _feeds(ids))
            voiced.append(len(ids))
            return out

        return call

    threads = _in_threads([voice(longest)])
    assert graph.held.wait(timeout=30)
    threads += _in_threads([voice(ids) for ids in short * 2])
    for thread in threads[1:]:
        thread.join(timeout=60)
    # Every short clause was voiced while the long one was still held, in
    # batches no larger than the graphs replay and never with the long one.
    assert sorted(voiced) == sorted(len(ids) for ids in short * 2)
    short_batches = [b for b in graph.batches if len(longest) not in b]
    assert sum(map(len, short_batches)) == len(short) * 2
    assert max(map(len, short_batches)) <= 2
    assert graph.batches.count([len(longest)]) == 1
    graph.release()
    threads[0].join(timeout=60)
    batched.close()
    assert voiced[-1] == len(longest)


def test_a_closed_batch_fails_its_callers_at_once(voice_model: bytes) -> None:
    from antiphon.stage1.voice_batch import BatchedVoiceGraph

    batched = BatchedVoiceGraph(TorchGraph(voice_model), hop=256, max_batch=4)
    batched.close()
    with pytest.raises(RuntimeError, match="closed"):
        batched.run(None, _feeds([1, 0, 2]))


def test_piper_on_the_torch_engine_says_what_onnxruntime_says(
    request: pytest.FixtureRequest,
) -> None:
    """The whole voice, text in: same chunks, texts and marks either way."""
    tiers.require(request, tiers.MODELS, "loads the Piper voice")
    from antiphon.stage1.assets import locate
    from antiphon.stage1.tts import Batched, PiperTts

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
