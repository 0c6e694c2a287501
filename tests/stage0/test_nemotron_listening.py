"""The `nemotron` backend's batch (listening.py) as its sessions use it: PCM16
at 16 kHz into each row's buffer, one step per 80 ms frame, frames out. Each
session's frames carry the tokens NeMo's `offline_inference` gives for that
session's audio alone, while sessions join, leave and take a prompt."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("nemo.collections.speechlm2")

from prometheus_client import CollectorRegistry

from antiphon.stage0.backends.moshi.lockstep import NoFreeRowError
from antiphon.stage0.backends.nemotron.listening import FRAME_SAMPLES, Listening
from antiphon.stage0.backends.nemotron.model import NemotronModel
from antiphon.stage0.metrics import Stage0Metrics
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import stage_pb2 as pb
from tests.support.speech import spoken

pytestmark = pytest.mark.models

RATE = 16_000
FRAMES = 30


@pytest.fixture(scope="module")
def model() -> NemotronModel:
    torch.set_num_threads(1)
    return NemotronModel.load(Stage0Settings(duplex_checkpoint="random:tiny", duplex_device="cpu"))


def _pcm(text: str, voice: str) -> bytes:
    pcm = spoken(text, RATE, voice=voice)  # type: ignore[arg-type]
    want = FRAMES * FRAME_SAMPLES * 2
    return (pcm + bytes(want))[:want]


@pytest.fixture(scope="module")
def calls() -> list[bytes]:
    return [
        _pcm("hello there, how can I help you today?", "piper"),
        _pcm("the weather is sunny and warm in paris", "espeak"),
        _pcm("please call the function get weather", "espeak"),
    ]


def _reference(model: NemotronModel, pcm: bytes, prompt: list[int] | None = None) -> list[int]:
    audio = torch.from_numpy(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0)
    extra = {}
    if prompt:
        extra = {
            "prompt_tokens": torch.tensor([prompt]),
            "prompt_token_lens": torch.tensor([len(prompt)]),
        }
    with torch.no_grad():
        ans = model.stt.streaming_inference.offline_inference(
            audio[None], torch.tensor([len(audio)]), **extra
        )
    # A session's n-th step hears its n-th whole frame: the n first tokens.
    return ans["tokens_text"][0][:FRAMES].tolist()


def _collector(into: list[pb.ModelFrame]):
    def emit(event: pb.Stage0Event) -> None:
        if event.HasField("frame"):
            into.append(event.frame)

    return emit


def _listening(model: NemotronModel, slots: int) -> Listening:
    metrics = Stage0Metrics(CollectorRegistry())
    return Listening(model, slots, metrics=metrics, jitter_ms=4000, quiet_frames=2, window=500)


def test_sessions_joining_and_leaving_hear_and_say_what_each_alone_would(model, calls):
    listening = _listening(model, 2)
    frames: list[list[pb.ModelFrame]] = [[], [], []]
    first = listening.open(_collector(frames[0]), "a")
    listening.hear(first, calls[0])
    second = listening.open(_collector(frames[1]), "b")
    listening.hear(second, calls[1])
    leave = 11
    for _ in range(leave):
        listening.step()
    listening.release(second)
    with pytest.raises(NoFreeRowError):
        listening.open(_collector([]), "x", index=0)
    third = listening.open(_collector(frames[2]), "c")
    assert third.index == second.index
    listening.hear(third, calls[2])
    for _ in range(FRAMES):
        listening.step()
    said = [[f.tokens[0] for f in fs] for fs in frames]
    assert said[0] == _reference(model, calls[0]) + said[0][FRAMES:]
    assert said[1] == _reference(model, calls[1])[:leave]
    assert said[2] == _reference(model, calls[2])
    # Text is the token's, and the frame grid is the session's own.
    assert [f.index for f in frames[2]] == list(range(FRAMES))
    assert all(f.text == model.text_of(f.tokens[0]) for f in frames[0])


def test_a_prompt_goes_in_at_once_and_the_call_is_heard_from_its_first_frame(model, calls):
    listening = _listening(model, 1)
    frames: list[pb.ModelFrame] = []
    prompt = model.prefill("you are a helpful weather assistant", "")
    assert prompt[0] == model.stt.text_bos_id and prompt[-1] == model.stt.text_eos_id
    row = listening.open(_collector(frames), "a", prompt)
    listening.hear(row, calls[0])
    for _ in range(FRAMES):
        listening.step()
    said = [f.tokens[0] for f in frames]
    assert said == _reference(model, calls[0], prompt)
    assert said != _reference(model, calls[0])
