"""The `nemotron` backend's hearing (hearing.py) against NeMo's own
perception: rows stepped together one 80 ms frame at a time, one of them
restarted mid-run for a new session, each give at every step what
`stt.perception` gives over that row's audio alone since its (re)start (the
tiny random checkpoint)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from antiphon.common.nemotron import checkpoint
from antiphon.stage0.backends.nemotron.hearing import FRAME_SAMPLES, Hearing
from tests.support.speech import spoken

pytest.importorskip("nemo.collections.speechlm2")

pytestmark = pytest.mark.models

RATE = 16_000
# Past the encoder's 32 frames of left context, so its attention cache wraps.
STEPS = 40
RESTART = 14  # row 1's second session starts at this step
# Float32 rounding only: the same modules run on other shapes (one frame of
# three rows, against one row's whole input) sum in other orders (~5e-7 seen
# at a scale of ~1.4). No frame is partial: step n's frame rests only on mel
# columns whose audio has all arrived (hearing.py's docstring).
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def stt():
    torch.set_num_threads(1)
    return checkpoint.resolve("random:tiny").stt()


def _speech(text: str, frames: int) -> torch.Tensor:
    pcm = (
        np.frombuffer(spoken(text, RATE, voice="espeak"), dtype="<i2").astype(np.float32) / 32768.0
    )
    pcm = np.pad(pcm, (0, max(0, frames * FRAME_SAMPLES - len(pcm))))[: frames * FRAME_SAMPLES]
    return torch.from_numpy(pcm)


def _tones(frames: int) -> torch.Tensor:
    t = torch.arange(frames * FRAME_SAMPLES) / RATE
    noise = torch.randn(len(t), generator=torch.Generator().manual_seed(7))
    return (
        0.3 * torch.sin(2 * torch.pi * 440 * t)
        + 0.2 * torch.sin(2 * torch.pi * 1250 * t)
        + 0.05 * noise
    )


@pytest.fixture(scope="module")
def sessions() -> list[list[tuple[int, torch.Tensor]]]:
    """Per row, its sessions as (first step, audio): row 1 hears tones and
    noise, then a new caller from step RESTART on."""
    return [
        [(0, _speech("hello there, how can I help you today?", STEPS))],
        [
            (0, _tones(RESTART)),
            (RESTART, _speech("the weather is sunny and warm", STEPS - RESTART)),
        ],
        [(0, _speech("please call the function get weather for paris", STEPS))],
    ]


def _perceived(stt, audio: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        embedded, _ = stt.perception(
            input_signal=audio[None], input_signal_length=torch.tensor([len(audio)])
        )
    return embedded[0]


def _session_at(row: list[tuple[int, torch.Tensor]], step: int) -> tuple[int, torch.Tensor]:
    return max((s for s in row if s[0] <= step), key=lambda s: s[0])


def _assert_close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    error = (got - want).abs().max().item()
    assert error <= TOLERANCE * want.abs().max().item(), f"{what}: off by {error:.2e}"


@pytest.fixture(params=[20, 25], ids=["window_20ms", "window_25ms"])
def window_ms(request, stt) -> Iterator[int]:
    """The mel window: tiny's 20 ms, or the 25 ms of NeMo's streaming
    FastConformers, whose STFT reaches further left of a column."""
    from nemo.collections.asr.modules import AudioToMelSpectrogramPreprocessor

    tiny = stt.perception.preprocessor
    if request.param != 20:
        stt.perception.preprocessor = AudioToMelSpectrogramPreprocessor(
            sample_rate=RATE,
            features=80,
            dither=0.0,
            pad_to=0,
            normalize="NA",
            window_size=request.param / 1000,
        ).eval()
    try:
        assert stt.perception.preprocessor.featurizer.win_length == RATE * request.param // 1000
        yield int(request.param)
    finally:
        stt.perception.preprocessor = tiny


def test_each_row_hears_what_perception_hears_of_its_own_audio_so_far(stt, sessions, window_ms):
    hearing = Hearing(stt, len(sessions))
    heard: list[list[torch.Tensor]] = [[] for _ in sessions]
    for step in range(STEPS):
        restart = [any(first == step for first, _ in row) for row in sessions]
        if step and any(restart):
            hearing.reset(torch.tensor(restart))
        frames = []
        for row in sessions:
            first, audio = _session_at(row, step)
            n = step - first
            frames.append(audio[n * FRAME_SAMPLES : (n + 1) * FRAME_SAMPLES])
        out = hearing.step(torch.stack(frames))
        assert out.shape == (len(sessions), stt.perception.proj.out_features)
        for i, row in enumerate(sessions):
            first, audio = _session_at(row, step)
            n = step - first + 1  # frames of this session heard, this one included
            so_far = _perceived(stt, audio[: n * FRAME_SAMPLES])
            _assert_close(out[i], so_far[n - 1], f"row {i} at step {step}")
            heard[i].append(out[i])

    # Frame for frame, each session's steps are also its whole recording's
    # perception (which has one more frame, on a column past its end).
    for i, row in enumerate(sessions):
        for first, audio in row:
            whole = _perceived(stt, audio)
            steps = len(audio) // FRAME_SAMPLES
            assert whole.shape[0] == steps + 1
            _assert_close(
                torch.stack(heard[i][first : first + steps]), whole[:steps], f"row {i}'s session"
            )
    # Not trivially equal: the rows heard different things.
    assert (heard[0][-1] - heard[2][-1]).abs().max() > 100 * TOLERANCE


def test_audio_not_one_frame_per_row_is_refused(stt):
    hearing = Hearing(stt, 2)
    with pytest.raises(ValueError, match="expected audio"):
        hearing.step(torch.zeros(2, FRAME_SAMPLES - 1))
    with pytest.raises(ValueError, match="expected audio"):
        hearing.step(torch.zeros(3, FRAME_SAMPLES))
