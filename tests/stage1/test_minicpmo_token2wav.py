"""MiniCPM-o 4.5's token2wav on the CPU, on a tiny random folder
(common/minicpmo/token2wav_assets.py): it streams what stepaudio2-minicpmo's
own `Token2wav.stream` streams, 960 samples a code, each turn on its own."""

from __future__ import annotations

import importlib.util
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from antiphon.common.minicpmo import stepaudio
from antiphon.common.minicpmo.token2wav_assets import write_tiny
from antiphon.stage1.backends.minicpmo.cuda_graphs import outside_captures
from antiphon.stage1.backends.minicpmo.solver_steps import KEPT, SolverSteps
from antiphon.stage1.backends.minicpmo.token2wav import (
    SILENCE,
    STEPS,
    BadSpeechCode,
    StreamFinished,
    Token2Wav,
)

pytestmark = pytest.mark.models

SAMPLES_PER_CODE = 960
# stepaudio2's Token2wav asks for CUDA autocast, which a CPU torch turns down.
_NO_CUDA_AUTOCAST = "ignore:CUDA is not available or torch_xla is imported:UserWarning"


def _codes(seed: int, n: int) -> list[int]:
    return [int(c) for c in np.random.default_rng(seed).integers(0, 6561, n)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    made = tmp_path_factory.mktemp("token2wav")
    write_tiny(made)
    return made


@pytest.fixture(scope="module")
def token2wav(folder: Path) -> Token2Wav:
    return Token2Wav.load(folder)


def _turn(token2wav: Token2Wav, chunks: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """The audio of each push of one turn, then of its final flush."""
    stream = token2wav.stream()
    return [stream.push(c) for c in chunks] + [stream.push([], last=True)]


@pytest.mark.filterwarnings(_NO_CUDA_AUTOCAST)
def test_a_turn_is_what_the_packages_own_token2wav_stream_makes(
    token2wav: Token2Wav, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stepaudio2's `Token2wav.stream` on the same files and codes, called as
    MiniCPM-o's duplex loop calls it (the 3 carried codes before each
    chunk's), gives the same samples, through the caches' cut-back (past
    150 frames here) and the vocoder's cross-fades."""
    chunks = [_codes(1, 25), _codes(2, 25), _codes(3, 25), _codes(4, 10)]
    ours = _turn(token2wav, chunks)

    package = _package_token2wav(monkeypatch)
    theirs = package.Token2wav.__new__(package.Token2wav)
    # What its __init__ sets, but on the CPU and from the same files; the
    # solver's scratch at the package's own size (16 steps).
    flow: Any = stepaudio.build_flow((folder / "flow.yaml").read_text(), steps=16, frames=1000)
    flow.load_state_dict(torch.load(folder / "flow.pt", weights_only=True))
    theirs.flow = flow.eval()
    theirs.hift = stepaudio.build_hift(torch.load(folder / "hift.pt", weights_only=True)).eval()
    theirs.float16, theirs.n_timesteps = False, STEPS
    theirs.mel_cache_len, theirs.source_cache_len = 8, 3840
    theirs.speech_window = torch.from_numpy(np.hamming(2 * 3840))
    # What _prepare_prompt would derive from a wav, then set_stream_cache's
    # body (it returns both caches; the caller assigns them).
    speaker = stepaudio.Speaker.read(folder / "speaker.pt")
    tokens, mel, spk = speaker.tokens[None].int(), speaker.mel[None], speaker.embedding[None]
    theirs.cache = (tokens, torch.tensor([tokens.shape[1]]), spk, mel, torch.tensor([mel.shape[1]]))
    pad = torch.full((1, 3), SILENCE, dtype=tokens.dtype)
    theirs.stream_cache = flow.setup_cache(torch.cat([tokens, pad], 1), mel, spk, n_timesteps=STEPS)
    theirs.hift_cache_dict = {
        "mel": torch.zeros(1, 80, 0),
        "source": torch.zeros(1, 1, 0),
        "speech": torch.zeros(1, 0),
    }

    carried = [SILENCE] * 3
    expected = []
    with _cuda_on_cpu():
        for call, chunk in enumerate([*chunks, []]):
            # Our k-th call of a turn draws the vocoder's noise from seed k.
            torch.manual_seed(call)
            last = call == len(chunks)
            wav = theirs.stream(carried + chunk, None, last_chunk=last, return_waveform=True)
            expected.append(wav[0])
            carried = (carried + chunk)[-3:]
    assert [len(a) for a in ours] == [len(a) for a in expected]
    np.testing.assert_array_equal(np.concatenate(ours), np.concatenate(expected))


def test_25_codes_are_a_second_and_a_turn_starts_with_3_silent_codes(
    token2wav: Token2Wav,
) -> None:
    """A turn of N codes is 960 x (N + 3) samples at 24 kHz: the first call
    holds back 3840 (160 ms) for the next one's cross-fade, the final flush
    returns them with the 3 codes of lookahead it speaks."""
    assert token2wav.rate == 24_000
    lengths = [len(a) for a in _turn(token2wav, [_codes(5, 25)] * 3)]
    assert lengths == [24_000 - 3840, 24_000, 24_000, 3840 + 3 * SAMPLES_PER_CODE]
    assert all(a.dtype == np.float32 for a in _turn(token2wav, [_codes(5, 25)]))


def test_two_interleaved_turns_each_sound_as_alone(token2wav: Token2Wav) -> None:
    """Streams share the flow and its scratch, one call at a time, but no
    state: interleaving two turns changes neither."""
    a_chunks, b_chunks = [_codes(6, 25), _codes(7, 20)], [_codes(8, 30), _codes(9, 12)]
    alone_a, alone_b = _turn(token2wav, a_chunks), _turn(token2wav, b_chunks)
    a, b = token2wav.stream(), token2wav.stream()
    mixed_a, mixed_b = [], []
    for chunk_a, chunk_b in zip(a_chunks, b_chunks, strict=True):
        mixed_a.append(a.push(chunk_a))
        mixed_b.append(b.push(chunk_b))
    mixed_b.append(b.push([], last=True))
    mixed_a.append(a.push([], last=True))
    np.testing.assert_array_equal(np.concatenate(mixed_a), np.concatenate(alone_a))
    np.testing.assert_array_equal(np.concatenate(mixed_b), np.concatenate(alone_b))
    # Different codes sound different (the comparison above could not pass by accident).
    assert not np.array_equal(alone_a[0][:4800], alone_b[0][:4800])


def test_a_batch_of_streams_at_different_places_sounds_as_each_alone(
    token2wav: Token2Wav,
) -> None:
    """One batch holds two streams far into their turns, two at their first push
    (one too short to call yet), one ending its turn and one whose push is
    split: the flow runs those of one shape together, and each sounds as
    alone, to float rounding of the batched products."""
    turns = {
        "far": [_codes(20, 25), _codes(21, 25), _codes(22, 25), _codes(23, 25)],
        "twin": [_codes(33, 25), _codes(34, 25), _codes(35, 25), _codes(36, 25)],
        "new": [_codes(24, 25), _codes(25, 25)],
        "short": [_codes(26, 2), _codes(27, 25)],
        "ending": [_codes(28, 25), _codes(29, 25), _codes(30, 7)],
        "long": [_codes(31, 25), _codes(32, token2wav.max_codes + 5)],
    }
    alone = {name: _turn(token2wav, chunks) for name, chunks in turns.items()}
    streams = {name: token2wav.stream() for name in turns}
    heard: dict[str, list[np.ndarray]] = {name: [] for name in turns}
    # Each push names its turn and its chunk, or None for the turn's end.
    schedule: list[list[tuple[str, int | None]]] = [
        [("far", 0), ("twin", 0)],
        [("far", 1), ("twin", 1), ("ending", 0), ("long", 0)],
        [("far", 2), ("twin", 2), ("new", 0), ("short", 0), ("ending", 1), ("long", 1)],
        [("far", 3), ("twin", 3), ("new", 1), ("short", 1), ("ending", 2)],
        [(name, None) for name in ("far", "twin", "new", "short", "ending", "long")],
    ]
    for pushes in schedule:
        batch = [
            (streams[name], [] if i is None else turns[name][i], i is None) for name, i in pushes
        ]
        for (name, _), audio in zip(pushes, token2wav.push_batch(batch), strict=True):
            heard[name].append(audio)
    for name in turns:
        np.testing.assert_allclose(
            np.concatenate(heard[name]), np.concatenate(alone[name]), atol=1e-5, rtol=0
        )
    assert len({round(float(np.abs(np.concatenate(a)).sum()), 3) for a in alone.values()}) == 6
    stream = token2wav.stream()
    with pytest.raises(ValueError, match="two pushes of one stream"):
        token2wav.push_batch([(stream, _codes(1, 25), False), (stream, _codes(2, 25), False)])


def test_float16_caches_take_half_the_memory_and_sound_as_float32(folder: Path) -> None:
    """A stream's solver caches in float16 are half their float32 bytes, and
    the attention still runs in float32 over them: the turn sounds as the
    float32 one to rounding, in a batch as alone."""
    half = Token2Wav.load(folder, cache_dtype="float16")
    full = Token2Wav.load(folder)
    chunks = [_codes(40, 25), _codes(41, 25), _codes(42, 25)]
    heard = np.concatenate(_turn(half, chunks))
    np.testing.assert_allclose(heard, np.concatenate(_turn(full, chunks)), atol=1e-5, rtol=0)
    streams = [half.stream(), full.stream()]
    for stream, token2wav in zip(streams, (half, full), strict=True):
        token2wav.push_batch([(stream, chunks[0], False), (token2wav.stream(), chunks[1], False)])
    caches = [stream.state.flow.row(stream.state.place[1]).estimator_att for stream in streams]
    assert caches[0].dtype == torch.float16 and caches[1].dtype == torch.float32
    assert caches[0].nbytes * 2 == caches[1].nbytes
    twin = half.stream()
    batched = half.push_batch([(twin, chunks[0], False), (half.stream(), chunks[2], False)])[0]
    np.testing.assert_allclose(batched, heard[: len(batched)], atol=1e-5, rtol=0)


def test_solver_steps_through_their_own_buffers_sound_as_the_package_s_call(
    folder: Path, token2wav: Token2Wav
) -> None:
    """The solver's DiT calls through buffers that outlive them (what a GPU
    captures as CUDA graphs and replays) give the same samples as the
    package's `blocks_forward_chunk` called directly, alone and in a batch,
    a step kept for each shape met (first calls, steady ones, a last one)."""
    static = Token2Wav.load(folder, solver_steps="static")
    chunks = [_codes(50, 25), _codes(51, 25), _codes(52, 25), _codes(53, 9)]
    np.testing.assert_array_equal(
        np.concatenate(_turn(static, chunks)), np.concatenate(_turn(token2wav, chunks))
    )
    # Two streams each, batched: one speaking the chunks, one the short last one.
    streams = {t2w: (t2w.stream(), t2w.stream()) for t2w in (static, token2wav)}
    for chunk in chunks[:3]:
        heard = [
            t2w.push_batch([(a, chunk, False), (b, chunks[3], False)])
            for t2w, (a, b) in streams.items()
        ]
        for ours, package in zip(*heard, strict=True):
            np.testing.assert_array_equal(ours, package)


def test_the_solver_s_kept_steps_share_one_arena_the_size_of_the_largest(folder: Path) -> None:
    """Steps of shapes met in any order (more shapes than are kept, old ones
    coming back) each give the DiT's own call's velocity and caches, while
    their buffers, together, take no more than half again the largest
    shape's and less than a buffer per shape would."""
    flow: Any = stepaudio.build_flow(
        (folder / stepaudio.FLOW_CONFIG).read_text(), steps=STEPS, frames=200
    )
    dit = flow.decoder.estimator.eval()
    steps = SolverSteps(dit, capture=False)
    rng = torch.Generator().manual_seed(5)

    def call(rows: int, frames: int, offset: int) -> tuple[torch.Tensor, ...]:
        def noise(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=rng)

        depth, width = len(dit.blocks), dit.t_embedder.mlp[-1].out_features
        x, t = noise(2 * rows, 320, frames), noise(2 * rows, 1, width)
        cnn, att = noise(depth, 2 * rows, 64, 2), noise(depth, 2 * rows, 2, offset, 32)
        return x, t, cnn, att, torch.zeros_like(cnn), noise(depth, 2 * rows, 2, offset + frames, 32)

    shapes = [(1, 50, 0), (1, 50, 50), (2, 50, 100), (3, 18, 150), (1, 50, 0), (2, 50, 100)]
    needs = []
    with torch.inference_mode():
        for shape in shapes:
            tensors = x, t, cnn, att, cnn_out, att_out = call(*shape)
            mine = steps(x, t, cnn, att, cnn_out, att_out)
            cnn_dit, att_dit = torch.zeros_like(cnn_out), torch.zeros_like(att_out)
            theirs = dit.blocks_forward_chunk(x, t, None, cnn, att, cnn_dit, att_dit)
            torch.testing.assert_close(mine, theirs, rtol=0, atol=0)
            torch.testing.assert_close(cnn_out, cnn_dit, rtol=0, atol=0)
            torch.testing.assert_close(att_out, att_dit, rtol=0, atol=0)
            needs.append(sum(a.numel() * a.element_size() for a in tensors))
    assert max(needs) <= steps.arena_bytes <= 1.5 * max(needs) + 4096
    assert steps.arena_bytes < sum(sorted(set(needs))[-KEPT:])


def test_hift_s_noise_waits_while_a_graph_is_captured(token2wav: Token2Wav) -> None:
    """HiFT reseeds and draws from the default generator, which a CUDA
    graph capture on the talker's thread holds: its draws wait for the
    capture (cuda_graphs.py), and then sound as they would have."""
    chunk = _codes(60, 25)
    alone = token2wav.stream().push(chunk)
    heard: list[np.ndarray] = []
    with outside_captures():
        voicing = threading.Thread(target=lambda: heard.append(token2wav.stream().push(chunk)))
        voicing.start()
        voicing.join(timeout=2.0)
        assert voicing.is_alive() and not heard
    voicing.join(timeout=60)
    np.testing.assert_array_equal(heard[0], alone)


@pytest.mark.parametrize("bad", [6561, -1, 10_000])
def test_a_code_outside_the_vocabulary_is_refused_and_nothing_taken(
    token2wav: Token2Wav, bad: int
) -> None:
    stream = token2wav.stream()
    with pytest.raises(BadSpeechCode, match=r"0\.\.6560"):
        stream.push([*_codes(10, 24), bad])
    assert isinstance(BadSpeechCode("x"), ValueError)
    chunks = [_codes(10, 25)]
    rest = [stream.push(c) for c in chunks] + [stream.push([], last=True)]
    np.testing.assert_array_equal(np.concatenate(rest), np.concatenate(_turn(token2wav, chunks)))


def test_a_first_push_too_short_for_the_vocoder_waits_for_the_next(token2wav: Token2Wav) -> None:
    """The first flow call must give HiFT its 8 held frames (4 codes): fewer
    wait, and the turn sounds as if they came with the next push."""
    codes = _codes(11, 25)
    stream = token2wav.stream()
    assert len(stream.push(codes[:3])) == 0
    held = [stream.push(codes[3:]), stream.push([], last=True)]
    np.testing.assert_array_equal(np.concatenate(held), np.concatenate(_turn(token2wav, [codes])))
    with pytest.raises(StreamFinished):
        stream.push(codes)


def test_a_push_longer_than_the_caches_hold_is_split(token2wav: Token2Wav) -> None:
    codes = _codes(12, token2wav.max_codes + 30)
    stream = token2wav.stream()
    audio = np.concatenate([stream.push(codes), stream.push([], last=True)])
    assert len(audio) == SAMPLES_PER_CODE * (len(codes) + 3)


def _package_token2wav(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """stepaudio2's own token2wav.py, loaded for its `Token2wav.stream`. Its
    prompt preparation imports torchaudio, s3tokenizer and hyperpyyaml,
    which `stream` never calls: they stand in as modules whose every
    function fails, for this test only."""
    stepaudio.module("flashcosyvoice.modules.hifigan")  # registers the package's shell
    audio: Any = _unusable("torchaudio")
    audio.compliance = _unusable("torchaudio.compliance")
    audio.compliance.kaldi = _unusable("torchaudio.compliance.kaldi")
    for stand_in in (audio, audio.compliance, audio.compliance.kaldi):
        monkeypatch.setitem(sys.modules, stand_in.__name__, stand_in)
    monkeypatch.setitem(sys.modules, "s3tokenizer", _unusable("s3tokenizer"))
    monkeypatch.setitem(sys.modules, "hyperpyyaml", _unusable("hyperpyyaml", "load_hyperpyyaml"))
    source = Path(sys.modules[stepaudio.PACKAGE].__path__[0]) / "token2wav.py"
    spec = importlib.util.spec_from_file_location(f"{stepaudio.PACKAGE}.token2wav", source)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def _unusable(name: str, *functions: str) -> types.ModuleType:
    stand_in = types.ModuleType(name)

    def fail(*_: Any, **__: Any) -> None:
        raise AssertionError(f"{name} is not installed here: this test must not reach it")

    for function in functions:
        setattr(stand_in, function, fail)
    return stand_in


@contextmanager
def _cuda_on_cpu() -> Iterator[None]:
    """Tensors the package makes on "cuda" (hard-coded) are made on the CPU."""
    from torch.overrides import TorchFunctionMode

    class CudaOnCpu(TorchFunctionMode):
        def __torch_function__(
            self,
            func: Callable[..., Any],
            types: Any,
            args: Sequence[Any] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            kwargs = dict(kwargs or {})
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "cpu"
            return func(*args, **kwargs)

    with CudaOnCpu():
        yield
