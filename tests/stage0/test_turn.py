"""semantic_vad: the end-of-turn rule (pure), Smart Turn on real speech (on
onnxruntime, and in torch as a GPU worker runs it), its int8 sums exact on
any x86 CPU, batching."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import numpy as np
import numpy.typing as npt
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError

from antiphon.common.assets import MissingAssetError
from antiphon.stage0 import assets as stage0_assets
from antiphon.stage0.assets import Stage0Assets
from antiphon.stage0.backends.cascade.asr.whisper_torch import mel_filters
from antiphon.stage0.backends.cascade.listening.exact_int8 import exact_int8_session, sums_exactly
from antiphon.stage0.backends.cascade.listening.turn import (
    EAGERNESS,
    FIRST_CHECK_MS,
    RECHECK_MS,
    WINDOW_SAMPLES,
    SemanticEndpointer,
    SmartTurn,
    TurnBatcher,
    TurnCheck,
    TurnModel,
    eagerness,
    window,
)
from antiphon.stage0.backends.cascade.listening.turn_torch import TorchSmartTurn, features
from antiphon.stage0.backends.cascade.listening.vad import (
    FRAME_MS,
    Endpointer,
    EndpointerConfig,
    SpeechStarted,
    SpeechStopped,
    VadEvent,
)
from antiphon.stage0.backends.cascade.llm.cpu_choice import CpuFeatures
from antiphon.stage0.backends.cascade.models import load_turn
from antiphon.stage0.settings import Stage0Settings
from bench.lib.results import REPO
from bench.probes.turn_gpu import fixture_clips, logit
from tests.support.speech import Voice, silence, spoken, spoken_cut

SPEECH, QUIET = 0.9, 0.0


def _rule(name: str = "auto") -> tuple[SemanticEndpointer, Endpointer]:
    semantic = SemanticEndpointer(eagerness(name))
    cfg = EndpointerConfig(silence_duration_ms=semantic.max_silence_ms)
    return semantic, Endpointer(cfg)


def _drive(
    semantic: SemanticEndpointer,
    endpointer: Endpointer,
    probs: list[float],
    answer: Callable[[TurnCheck], float | None],
    checks: list[TurnCheck] | None = None,
) -> list[VadEvent]:
    """Frames through the endpointer, each followed by the question due, if any,
    answered at once (`answer` returning None leaves it unanswered)."""
    events: list[VadEvent] = []
    for p in probs:
        event = endpointer.update(p)
        if event is not None:
            events.append(event)
        check = semantic.due(endpointer)
        if check is None:
            continue
        if checks is not None:
            checks.append(check)
        probability = answer(check)
        if probability is not None:
            stopped = semantic.decide(check, probability, endpointer)
            if stopped is not None:
                events.append(stopped)
    return events


def _unanswered(into: list[TurnCheck]) -> Callable[[TurnCheck], None]:
    """Keep each question for later; answer none now."""

    def hold(check: TurnCheck) -> None:
        into.append(check)

    return hold


def _stops(events: list[VadEvent]) -> list[SpeechStopped]:
    return [e for e in events if isinstance(e, SpeechStopped)]


def _frames(ms: int) -> int:
    return -(-ms // FRAME_MS)


# ------------------------------------------------------------ the rule (pure)


def test_eagerness_follows_openai_auto_is_medium_and_longest_waits_are_8_4_2_s() -> None:
    assert eagerness("auto") == eagerness("medium") == eagerness("") == EAGERNESS["medium"]
    waits = {name: EAGERNESS[name].max_silence_ms for name in ("low", "medium", "high")}
    assert waits == {"low": 8000, "medium": 4000, "high": 2000}
    # More eager: ends sooner on a less certain model, and `high` asks it sooner.
    assert EAGERNESS["high"].threshold < EAGERNESS["medium"].threshold < EAGERNESS["low"].threshold
    firsts = {name: EAGERNESS[name].first_check_ms for name in ("low", "medium", "high")}
    assert firsts == {"low": FIRST_CHECK_MS, "medium": FIRST_CHECK_MS, "high": 120}


def test_high_eagerness_ends_a_likely_turn_at_its_sooner_first_check() -> None:
    probs = [SPEECH] * 30 + [QUIET] * _frames(1000)
    ends = {}
    for name in ("high", "medium"):
        semantic, endpointer = _rule(name)
        (stopped,) = _stops(_drive(semantic, endpointer, probs, lambda _c: 0.9))
        ends[name] = stopped.audio_end_ms - stopped.offset_ms
    assert 120 <= ends["high"] < 120 + FRAME_MS
    assert FIRST_CHECK_MS <= ends["medium"] < FIRST_CHECK_MS + FRAME_MS


def test_a_likely_end_of_turn_ends_at_the_first_check_well_before_server_vad() -> None:
    semantic, endpointer = _rule()
    checks: list[TurnCheck] = []
    events = _drive(
        semantic, endpointer, [SPEECH] * 30 + [QUIET] * _frames(5000), lambda _c: 0.9, checks
    )
    assert [type(e) for e in events] == [SpeechStarted, SpeechStopped]
    (stopped,) = _stops(events)
    assert stopped.offset_ms == 30 * FRAME_MS
    (check,) = checks
    assert stopped.audio_end_ms == check.at_ms
    assert FIRST_CHECK_MS <= stopped.audio_end_ms - stopped.offset_ms < FIRST_CHECK_MS + FRAME_MS
    assert not endpointer.in_speech


def test_an_unlikely_end_waits_to_the_longest_silence_asking_again_as_it_grows() -> None:
    semantic, endpointer = _rule("medium")
    checks: list[TurnCheck] = []
    events = _drive(
        semantic, endpointer, [SPEECH] * 30 + [QUIET] * _frames(6000), lambda _c: 0.1, checks
    )
    (stopped,) = _stops(events)
    assert stopped.audio_end_ms - stopped.offset_ms == pytest.approx(4000, abs=FRAME_MS)
    silences = [c.at_ms - c.silence_start_ms for c in checks]
    assert silences[0] >= FIRST_CHECK_MS
    assert all(b - a >= RECHECK_MS for a, b in itertools.pairwise(silences))
    assert len(checks) == 1 + (4000 - FIRST_CHECK_MS) // RECHECK_MS


@pytest.mark.parametrize("name", ["low", "medium", "high"])
def test_each_eagerness_ends_early_at_its_threshold_and_not_below(name: str) -> None:
    level = EAGERNESS[name]
    probs = [SPEECH] * 30 + [QUIET] * _frames(level.max_silence_ms + 1000)
    semantic, endpointer = _rule(name)
    (early,) = _stops(_drive(semantic, endpointer, probs, lambda _c: level.threshold))
    assert early.audio_end_ms - early.offset_ms < level.first_check_ms + FRAME_MS
    semantic, endpointer = _rule(name)
    (late,) = _stops(_drive(semantic, endpointer, probs, lambda _c: level.threshold - 0.01))
    assert late.audio_end_ms - late.offset_ms == pytest.approx(level.max_silence_ms, abs=FRAME_MS)


def test_speech_resuming_before_the_answer_cancels_the_end() -> None:
    semantic, endpointer = _rule()
    pending: list[TurnCheck] = []
    pause = [SPEECH] * 30 + [QUIET] * _frames(300)
    _drive(semantic, endpointer, pause, _unanswered(pending))
    (check,) = pending
    # The user goes on before the model answers; its "complete" is about a pause that is over.
    _drive(semantic, endpointer, [SPEECH] * 10, lambda _c: None)
    assert semantic.decide(check, 0.99, endpointer) is None
    assert endpointer.in_speech
    # The next silence is asked about afresh and can end the turn.
    checks: list[TurnCheck] = []
    events = _drive(semantic, endpointer, [QUIET] * _frames(1000), lambda _c: 0.99, checks)
    assert checks[0].silence_start_ms != check.silence_start_ms
    assert [e.audio_end_ms for e in _stops(events)] == [checks[0].at_ms]


def test_an_answer_after_the_turn_ended_or_the_input_was_cleared_ends_nothing() -> None:
    semantic, endpointer = _rule()
    pending: list[TurnCheck] = []
    _drive(semantic, endpointer, [SPEECH] * 30 + [QUIET] * 10, _unanswered(pending))
    endpointer.reset()  # input_audio_buffer.clear
    assert semantic.decide(pending[0], 0.99, endpointer) is None
    assert not endpointer.in_speech


def test_one_question_at_a_time_and_a_late_answer_still_ends_where_it_was_asked() -> None:
    semantic, endpointer = _rule()
    asked: list[TurnCheck] = []
    _drive(semantic, endpointer, [SPEECH] * 30 + [QUIET] * _frames(1500), _unanswered(asked))
    assert len(asked) == 1  # unanswered: nothing more is asked
    stopped = semantic.decide(asked[0], 0.9, endpointer)
    assert stopped is not None and stopped.audio_end_ms == asked[0].at_ms < endpointer.now_ms


def test_end_turn_needs_a_silence_and_the_next_onset_never_pads_before_it() -> None:
    endpointer = Endpointer(EndpointerConfig(prefix_padding_ms=1000, silence_duration_ms=4000))
    for _ in range(10):
        endpointer.update(SPEECH)
    assert endpointer.end_turn() is None  # speech going on
    for _ in range(10):
        endpointer.update(QUIET)
    stopped = endpointer.end_turn()
    assert stopped is not None and stopped.audio_end_ms == endpointer.now_ms
    assert endpointer.end_turn() is None  # already ended
    started = [e for e in (endpointer.update(SPEECH) for _ in range(10)) if e is not None]
    assert isinstance(started[0], SpeechStarted)
    assert started[0].audio_start_ms == stopped.audio_end_ms


def test_window_is_the_last_8_s_zero_padded_at_the_front() -> None:
    short = window(b"\x00\x40" * 1600)  # 0.1 s of 0.5
    assert short.shape == (WINDOW_SAMPLES,) and short.dtype == np.float32
    assert not short[:-1600].any() and np.allclose(short[-1600:], 0.5)
    ramp = np.arange(WINDOW_SAMPLES + 500, dtype="<i2")
    long = window(ramp.tobytes())
    assert np.allclose(long, ramp[500:].astype(np.float32) / 32768.0)


def test_missing_pipecat_is_a_startup_error_naming_make_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        stage0_assets.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pipecat" else real(name, *a),
    )
    with pytest.raises(MissingAssetError, match="pipecat-ai") as caught:
        stage0_assets.locate_turn()
    assert "make install" in str(caught.value)


# ------------------------------------------------------------ exact int8 sums


def _saturating_matmul(k: int) -> bytes:
    """An int8 QDQ MatMul, as Smart Turn's are: a row of uint8 255s (1.0) by
    int8 127s (1.0), `k` of each, so every product is 255 x 127."""
    one_u8 = 1.0 / 255
    one_s8 = 1.0 / 127
    initializers = [
        numpy_helper.from_array(np.array(one_u8, np.float32), "xs"),
        numpy_helper.from_array(np.array(0, np.uint8), "xz"),
        numpy_helper.from_array(np.full((k, 4), 127, np.int8), "w"),
        numpy_helper.from_array(np.array(one_s8, np.float32), "ws"),
        numpy_helper.from_array(np.array(0, np.int8), "wz"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
        helper.make_node("MatMul", ["xd", "wd"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "saturating_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model.SerializeToString()


@pytest.mark.models
def test_int8_products_sum_exactly_on_this_cpu() -> None:
    """AVX2's u8s8 kernels would clip each pair's 64770 to 32767: 32.4, not 64."""
    session = exact_int8_session(_saturating_matmul(64), threads=1)
    (y,) = session.run(None, {"x": np.ones((1, 64), np.float32)})
    np.testing.assert_allclose(y, 64.0, rtol=1e-6)


@pytest.mark.parametrize(
    ("flags", "exact"),
    [
        ({"avx2", "fma"}, False),  # AMD Zen 2 and 3: VPMADDUBSW
        ({"avx2", "avx512f", "avx512bw"}, False),  # Skylake-SP: AVX-512, no VNNI
        ({"avx2", "avx512f", "avx512bw", "avx512_vnni"}, True),
        ({"avx2", "avx_vnni"}, True),  # Alder Lake's 256-bit VNNI
        ({"avx2", "avx512_vnni", "amx_int8", "amx_tile"}, True),
        (set(), False),  # /proc/cpuinfo unread: ask for exact sums anyway
    ],
)
def test_the_precision_entry_is_asked_for_only_without_an_int8_dot_product(
    flags: set[str], exact: bool
) -> None:
    assert sums_exactly(CpuFeatures(flags=frozenset(flags), cores=1)) is exact


# ------------------------------------------------------------ Smart Turn on real speech


@pytest.fixture(scope="module")
def onnx_turn(assets: Stage0Assets) -> SmartTurn:
    return SmartTurn(assets.turn.onnx, assets.turn.features, threads=1)


@pytest.fixture(scope="module")
def torch_turn(assets: Stage0Assets) -> TurnModel:
    """`turn_engine: torch`, as a GPU worker loads it, here on the CPU."""
    model = load_turn(Stage0Settings(turn_engine="torch"), assets.turn)
    assert isinstance(model, TorchSmartTurn)
    return model


@pytest.fixture(scope="module", params=["onnxruntime", "torch"])
def smart_turn(request: pytest.FixtureRequest, onnx_turn: SmartTurn) -> TurnModel:
    """Smart Turn on each engine a worker runs it on."""
    if request.param == "torch":
        return cast(TurnModel, request.getfixturevalue("torch_turn"))
    return onnx_turn


def _after_speech(pcm16: bytes, silence_ms: int = 200) -> bytes:
    """As stage0 asks at its first check: the utterance, then a short silence."""
    return silence(300, 16000) + pcm16 + silence(silence_ms, 16000)


@pytest.mark.models
def test_the_model_loads_without_importing_pipecat(onnx_turn: SmartTurn) -> None:
    assert onnx_turn.batched  # v3.2's batch dimension is dynamic
    assert not [m for m in sys.modules if m == "pipecat" or m.startswith("pipecat.")]


# espeak's questions end without the pitch of a finished question and score low;
# its requests and Piper's questions score high.
COMPLETE: list[tuple[Voice, str]] = [
    ("piper", "What is the capital of France?"),
    ("piper", "Where is the nearest train station?"),
    ("piper", "How do I make a cup of tea?"),
    ("espeak", "Please tell me a joke."),
    ("espeak", "Set a timer for ten minutes."),
    ("espeak", "Turn off the lights in the kitchen."),
]


@pytest.mark.models
@pytest.mark.parametrize(("voice", "text"), COMPLETE)
def test_a_complete_turn_scores_high(smart_turn: TurnModel, voice: Voice, text: str) -> None:
    (p,) = smart_turn.predict([_after_speech(spoken(text, 16000, voice))])
    assert p > 0.8, p


# Speech broken off mid-sentence, cut from the whole sentence's audio (a
# truncated sentence spoken alone ends in a sentence's falling tone, and Piper's
# then scores high).
BROKEN_OFF: list[tuple[Voice, str, int]] = [
    ("piper", "So I was thinking that we could go to the beach tomorrow.", 4),
    ("piper", "Yesterday I went to the market and bought some apples.", 7),
    ("espeak", "What I really want is a quiet place to read.", 5),
    ("espeak", "I need to book a flight to Paris for next week.", 7),
]


@pytest.mark.models
@pytest.mark.parametrize(("voice", "text", "words"), BROKEN_OFF)
def test_speech_broken_off_mid_sentence_scores_below_every_threshold(
    smart_turn: TurnModel, voice: Voice, text: str, words: int
) -> None:
    (p,) = smart_turn.predict([_after_speech(spoken_cut(text, words, 16000, voice))])
    assert p < min(e.threshold for e in EAGERNESS.values()), p


def _fixture_clips() -> list[bytes]:
    complete = [_after_speech(spoken(text, 16000, voice)) for voice, text in COMPLETE]
    cut = [_after_speech(spoken_cut(t, n, 16000, v)) for v, t, n in BROKEN_OFF]
    return complete + cut


@pytest.mark.models
def test_a_batched_call_gives_the_probabilities_of_one_by_one(smart_turn: TurnModel) -> None:
    clips = _fixture_clips()
    together = smart_turn.predict(clips)
    alone = np.concatenate([smart_turn.predict([w]) for w in clips])
    assert together.shape == (len(clips),)
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_a_gpu_turn_device_without_the_torch_engine_is_refused() -> None:
    with pytest.raises(ValidationError, match="turn_engine torch"):
        Stage0Settings(turn_device="cuda")
    assert Stage0Settings(turn_engine="torch", turn_device="cuda:1").turn_device == "cuda:1"


@pytest.mark.models
def test_torch_features_are_pipecats_computed_in_a_batch(onnx_turn: SmartTurn) -> None:
    windows = [window(clip) for clip in _fixture_clips()[::3]]
    expected = np.stack([onnx_turn.features(w) for w in windows])
    got = features(torch.from_numpy(np.stack(windows)), torch.from_numpy(mel_filters(80)))
    assert got.shape == expected.shape == (len(windows), 80, 800)
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-4)


@pytest.mark.models
def test_torch_engine_answers_as_onnxruntime_does(
    onnx_turn: SmartTurn, torch_turn: TurnModel
) -> None:
    """The same int8 graph: a requantized value rounds the other way here and
    there (onnxruntime fuses its steps), which moves the logit a little, and
    never across an eagerness's threshold on these fixtures. Each hears a
    clip's last 8 s (the last clip is longer)."""
    clips = _fixture_clips()
    clips.append(spoken(BROKEN_OFF[0][1], 16000, "piper") * 3 + clips[0])
    cpu, gpu = onnx_turn.predict(clips), torch_turn.predict(clips)
    assert np.abs(logit(cpu) - logit(gpu)).max() < 0.5, (cpu, gpu)
    for level in EAGERNESS.values():
        assert ((cpu >= level.threshold) == (gpu >= level.threshold)).all(), (level, cpu, gpu)


@pytest.mark.models
def test_onnxruntime_answers_as_on_the_hosts_the_benchmarks_ran_on(onnx_turn: SmartTurn) -> None:
    """The recorded questions, whole and broken off (bench/probes/turn_gpu.py), score
    what onnxruntime gave on the host of turn-h100.json (its CPU; the dev box's
    run, in git at 6f05906, agreed to 1e-3), whatever this CPU's int8 kernels:
    on AVX2 without exact sums one scored 0.704 for 0.967."""
    recorded = json.loads((REPO / "bench" / "results" / "turn-h100.json").read_text())
    expected = np.array(recorded["against_onnxruntime"]["onnxruntime"])
    np.testing.assert_allclose(onnx_turn.predict(fixture_clips()), expected, atol=1e-3)


@pytest.mark.models
async def test_batcher_runs_every_waiting_session_in_one_call(smart_turn: TurnModel) -> None:
    """Windows submitted in one event-loop turn share a model call; a closed
    session's answer is dropped; one window submitted during a call waits for the next."""
    clips = _fixture_clips()[:4]
    expected = smart_turn.predict(clips)
    sizes: list[int] = []
    answers: dict[int, float] = {}
    done = asyncio.Event()
    with ThreadPoolExecutor(1) as executor:
        batcher = TurnBatcher(smart_turn, executor=executor, observe_batch=sizes.append)

        def answered(key: int) -> Callable[[float], None]:
            def on_probability(p: float) -> None:
                answers[key] = p
                if len(answers) == 3:
                    done.set()

            return on_probability

        for key, w in enumerate(clips[:3]):
            batcher.submit(key, w, answered(key))
        batcher.submit("closed", clips[3], lambda _p: pytest.fail("answered a closed session"))
        batcher.discard("closed")
        await asyncio.wait_for(done.wait(), 30)
        late = asyncio.get_running_loop().create_future()
        batcher.submit("late", clips[3], late.set_result)
        assert await asyncio.wait_for(late, 30) == pytest.approx(float(expected[3]), abs=1e-5)
    assert sizes == [3, 1]
    assert [answers[k] for k in range(3)] == pytest.approx(
        [float(p) for p in expected[:3]], abs=1e-5
    )


class _HeldModel:
    """Smart Turn's boundary (`predict`), answering once the test lets it."""

    def __init__(self) -> None:
        self.go = threading.Event()

    def predict(self, clips: Sequence[bytes]) -> npt.NDArray[np.float32]:
        self.go.wait(5)
        return np.full(len(clips), SPEECH, dtype=np.float32)


async def test_batcher_idle_waits_until_every_window_is_answered() -> None:
    """`idle` is the barrier tests feed audio by: an idle batcher answers at once,
    a busy one once the last answer was delivered."""
    model = _HeldModel()
    answers: list[float] = []
    with ThreadPoolExecutor(1) as executor:
        batcher = TurnBatcher(model, executor=executor)
        await asyncio.wait_for(batcher.idle(), 1)
        batcher.submit("s", b"\0\0" * WINDOW_SAMPLES, answers.append)
        idle = asyncio.ensure_future(batcher.idle())
        finished, _ = await asyncio.wait({idle}, timeout=0.05)
        assert not finished and answers == []
        model.go.set()
        await asyncio.wait_for(idle, 5)
        assert answers == [pytest.approx(SPEECH)]
