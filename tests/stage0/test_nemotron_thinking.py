"""The `nemotron` backend's LLM stepping (thinking.py) against NeMo's own
inference: each session's text tokens, stepped in a batch of rows while
sessions join and leave, equal `offline_inference` on that session's audio
alone (greedy, the tiny random checkpoint)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("nemo.collections.speechlm2")

from antiphon.common.nemotron import checkpoint
from antiphon.stage0.backends.nemotron.thinking import Thinking
from tests.support.speech import spoken

pytestmark = pytest.mark.models

RATE = 16_000
SECONDS = 3


@pytest.fixture(scope="module")
def stt():
    torch.set_num_threads(1)
    return checkpoint.resolve("random:tiny").stt()


def _audio(pcm16: bytes) -> torch.Tensor:
    x = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768.0
    x = np.pad(x, (0, max(0, RATE * SECONDS - len(x))))[: RATE * SECONDS]
    return torch.from_numpy(x)


@pytest.fixture(scope="module")
def sessions():
    """Three callers' audio: two voices speaking, one noise."""
    return [
        _audio(spoken("hello there, how can I help you today?", RATE, voice="piper")),
        _audio(spoken("the weather is sunny and warm in paris", RATE, voice="espeak")),
        0.1 * torch.randn(RATE * SECONDS, generator=torch.Generator().manual_seed(3)),
    ]


def _reference(stt, audio: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        ans = stt.streaming_inference.offline_inference(audio[None], torch.tensor([len(audio)]))
    return ans["tokens_text"][0]


def _heard(stt, audio: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        emb, _, _ = stt.perception(
            input_signal=audio[None],
            input_signal_length=torch.tensor([len(audio)]),
            return_encoder_emb=True,
        )
    return emb[0]


def test_rows_joining_and_leaving_say_what_each_session_alone_says(stt, sessions):
    refs = [_reference(stt, a) for a in sessions]
    assert all(len(set(r.tolist())) > 1 for r in refs[:2]), "speech should move the random model"
    _two_rows_say_what_each_alone_says(stt, sessions, refs)


def test_forced_turn_taking_corrects_each_row_as_nemo_corrects_one_session(sessions):
    """A checkpoint that sets `force_turn_taking` (it transcribes the user):
    each row's text is corrected from its ASR channel as NeMo's inference
    corrects one session's, rows joining and leaving. The tiny model's ASR
    channel never says BOS or EOS, so the legacy marks name tokens it says
    (nor padding: the silence rule is not reached here)."""
    tiny = checkpoint.resolve("random:tiny")
    tiny.config["model"]["stt"]["model"].update(
        predict_user_text=True,
        force_turn_taking=True,
        force_turn_taking_threshold=4,
        force_turn_taking_pad_window=2,
        user_eos_token="b",
        user_bos_token="'",
    )
    stt = tiny.stt()
    refs = [_reference(stt, a) for a in sessions]
    stt.cfg["force_turn_taking"] = False
    plain = [_reference(stt, a).tolist() for a in sessions]
    stt.cfg["force_turn_taking"] = True
    changed = sum(r.tolist() != p for r, p in zip(refs, plain, strict=True))
    assert changed >= 2, "the rule should have turned some of the sessions"
    _two_rows_say_what_each_alone_says(stt, sessions, refs)


def _two_rows_say_what_each_alone_says(stt, sessions, refs) -> None:
    heard = [_heard(stt, a) for a in sessions]
    frames = heard[0].shape[0]
    late = 9  # session 2 joins row 1 at this step, after session 1 left it
    thinking = Thinking(stt, 2, window=4 * frames)
    said: dict[int, list[int]] = {0: [], 1: [], 2: []}
    zero = torch.zeros_like(heard[0][0])
    with torch.no_grad():
        for t in range(frames + late):
            if t == late:
                thinking.reset(torch.tensor([False, True]))
            row0 = heard[0][t] if t < frames else zero
            if t < late:
                row1, owner = heard[1][t], 1
            else:
                row1, owner = heard[2][t - late], 2
            tokens = thinking.step(torch.stack([row0, row1])).tolist()
            if t < frames:
                said[0].append(tokens[0])
            said[owner].append(tokens[1])
    assert said[0] == refs[0].tolist()
    # Session 1 left after `late` frames: what it heard until then it said.
    assert said[1] == refs[1][:late].tolist()
    assert said[2] == refs[2].tolist()


def test_a_window_shorter_than_the_session_changes_only_what_comes_after_it(stt, sessions):
    ref = _reference(stt, sessions[0])
    heard = _heard(stt, sessions[0])
    window = 12
    thinking = Thinking(stt, 1, window=window)
    with torch.no_grad():
        tokens = [int(thinking.step(heard[t][None])[0]) for t in range(heard.shape[0])]
    assert tokens[:window] == ref[:window].tolist()
    assert thinking._valid.shape[1] == window


def test_a_prompt_taken_in_at_once_is_what_nemo_prepends(stt, sessions):
    """Session 0 joins row 0 with a prompt, in one forward of its own, while
    row 1 is mid-call: each says what NeMo's inference says given that prompt
    (`prompt_tokens`) or none."""
    ids = stt.tokenizer.text_to_ids("you are a helpful weather assistant")
    prompt = [stt.text_bos_id, *ids, stt.text_eos_id]
    with torch.no_grad():
        ans = stt.streaming_inference.offline_inference(
            sessions[0][None],
            torch.tensor([len(sessions[0])]),
            prompt_tokens=torch.tensor([prompt]),
            prompt_token_lens=torch.tensor([len(prompt)]),
        )
    ref = ans["tokens_text"][0].tolist()
    plain = _reference(stt, sessions[1]).tolist()
    heard = [_heard(stt, a) for a in sessions[:2]]
    thinking = Thinking(stt, 2, window=1000)
    joins = 5
    said: list[list[int]] = [[], []]
    with torch.no_grad():
        for t in range(joins + heard[0].shape[0]):
            if t == joins:
                thinking.reset(torch.tensor([True, False]))
                thinking.prefill(0, prompt)
            row0 = heard[0][t - joins] if t >= joins else torch.zeros_like(heard[0][0])
            row1 = heard[1][t] if t < heard[1].shape[0] else torch.zeros_like(row0)
            tokens = thinking.step(torch.stack([row0, row1])).tolist()
            if t >= joins:
                said[0].append(tokens[0])
            if t < heard[1].shape[0]:
                said[1].append(tokens[1])
    assert said[0] == ref
    assert said[0] != _reference(stt, sessions[0]).tolist()
    assert said[1] == plain


def test_rows_step_in_bfloat16_as_the_gpu_serves_them(sessions):
    """The worker casts the model to `duplex_dtype` (bfloat16 on a GPU): every
    input the rows build is in the model's dtype, and the rows' tokens are
    the ones bfloat16 NeMo says for each session alone."""
    stt = checkpoint.resolve("random:tiny").stt().to(torch.bfloat16)
    audio = sessions[0]
    with torch.no_grad():
        want = _reference(stt, audio)
        heard = _heard(stt, audio)
        rows = Thinking(stt, 2, window=500)
        said = [rows.step(torch.stack([h, h]))[0].item() for h in heard]
    assert heard.dtype == torch.bfloat16
    assert said == want[: len(said)].tolist()
