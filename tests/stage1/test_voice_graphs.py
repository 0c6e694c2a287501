"""The voice's graph in padded parts (voice_graphs.py) and Piper's spline
selections taken densely (common/onnx/torch_graph.py): what the CUDA graphs replay, run
eagerly on the CPU. Each sentence must come out as it does alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from antiphon.common.onnx.torch_graph import TorchGraph
from antiphon.stage1.backends.piper.voice_graphs import FRAME_STEP, PHONEME_STEP, GraphedVoice
from tests.support import tiers

pytestmark = pytest.mark.models

HOP = 256


@pytest.fixture(scope="module")
def voice_model(request: pytest.FixtureRequest) -> onnx.ModelProto:
    tiers.require(request, tiers.MODELS, "loads the Piper voice")
    from antiphon.stage1.backends.piper.assets import locate
    from antiphon.stage1.backends.piper.voice_batch import with_durations

    return with_durations(onnx.load(str(locate().voice_onnx)))


@pytest.fixture(scope="module")
def sentences() -> list[list[int]]:
    from piper import PiperVoice

    from antiphon.stage1.backends.piper.assets import locate

    voice = PiperVoice.load(locate().voice_onnx)
    text = "Sure. The store opens at nine, and it closes at five. Is there more?"
    return [voice.phonemes_to_ids(p) for p in voice.phonemize(text)]


def _batch(rows: list[list[int]], scales: list[float]) -> dict[str, np.ndarray]:
    width = max(map(len, rows))
    return {
        "input": np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int64),
        "input_lengths": np.array([len(r) for r in rows], dtype=np.int64),
        "scales": np.array(scales, dtype=np.float32),
    }


def test_sentences_padded_to_buckets_sound_as_each_does_alone(
    voice_model: onnx.ModelProto, sentences: list[list[int]]
) -> None:
    torch.set_num_threads(1)
    alone = TorchGraph(voice_model)
    runs: list[str] = []
    padded = GraphedVoice(TorchGraph(voice_model), capture=False, observe_run=runs.append)
    audio, durations = padded.run(_batch(sentences, [0.0, 1.0, 0.0]))[:2]
    assert runs == ["nodes"]  # nothing recorded: node by node, padded all the same
    # Rows to a power of two, phonemes and frames to their steps.
    assert audio.shape[0] == 4 and durations.shape[-1] % PHONEME_STEP == 0
    assert audio.shape[-1] % (FRAME_STEP * HOP) == 0
    for row, ids in enumerate(sentences):
        want_audio, want_durations = alone.run(_batch([ids], [0.0, 1.0, 0.0]))[:2]
        got_durations = durations[row, ..., : len(ids)]
        torch.testing.assert_close(got_durations, want_durations[0], rtol=0, atol=0)
        samples = int(got_durations.sum()) * HOP
        assert samples == want_audio.shape[-1]
        assert float(want_audio.abs().max()) > 0.05  # it speaks
        torch.testing.assert_close(audio[row, ..., :samples], want_audio[0], rtol=0, atol=1e-3)


@pytest.mark.parametrize("noise_w", [0.8, 3.0])
def test_the_spline_selected_densely_gives_what_onnxruntime_does(
    voice_model: onnx.ModelProto, sentences: list[list[int]], noise_w: float
) -> None:
    """The duration predictor's noise fed as a fixed input: its spline then sees
    the same values in both engines, some outside its interval at a large
    noise_w, and the durations must agree exactly."""
    import onnxruntime

    model = onnx.ModelProto()
    model.CopyFrom(voice_model)
    noise = next(n for n in model.graph.node if n.name == "/dp/RandomNormalLike")
    # The noise becomes a graph input of the predictor's shape: (rows, 2, phonemes).
    model.graph.node.remove(noise)
    model.graph.input.append(
        onnx.helper.make_tensor_value_info(noise.output[0], onnx.TensorProto.FLOAT, None)
    )
    ids = sentences[1]
    feeds = _batch([ids], [0.667, 1.0, noise_w])
    feeds[noise.output[0]] = (
        np.random.default_rng(5).standard_normal((1, 2, len(ids))).astype(np.float32)
    )
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    runtime = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    want = runtime.run(None, feeds)[1]
    got = TorchGraph(model).run(feeds)[1].numpy()
    np.testing.assert_array_equal(got, want)


def test_a_graph_read_on_the_host_in_more_than_one_place_is_refused() -> None:
    """Two Ranges whose limits come from what is fed: no two parts replay it."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
        helper.make_node("Range", ["zero", "m", "one"], ["r"]),
        helper.make_node("ReduceMax", ["x"], ["n"], keepdims=0),
        helper.make_node("Range", ["zero", "n", "one"], ["s"]),
    ]
    ints = [
        helper.make_tensor(name, TensorProto.INT64, [], [v])
        for name, v in (("zero", 0), ("one", 1))
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in ("r", "s")],
        ints,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    assert TorchGraph(model).host_reads == ["m", "n"]
    with pytest.raises(ValueError, match="reads 2 values on the host"):
        GraphedVoice(TorchGraph(model), capture=False)


@pytest.mark.parametrize(
    "settings",
    [
        {"tts_cuda_graphs": True},
        {"tts_cuda_graphs": True, "tts_engine": "torch", "tts_device": "cpu"},
        {"tts_cuda_graphs": True, "tts_engine": "onnxruntime", "tts_device": "cuda"},
    ],
)
def test_cuda_graphs_need_the_torch_voice_on_a_cuda_device(settings: dict[str, object]) -> None:
    from pydantic import ValidationError

    from antiphon.stage1.settings import Stage1Settings

    with pytest.raises(ValidationError, match="tts_cuda_graphs needs tts_engine torch"):
        Stage1Settings(**settings)  # type: ignore[arg-type]
    assert Stage1Settings(tts_cuda_graphs=True, tts_engine="torch", tts_device="cuda:1")
