"""A random-weights LLM in a whole-stack bench is held to common words
(bench/gpu/speakable.py): the list make_dummy writes, as stage0 reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from antiphon.common.assets import default_cache_dir
from antiphon.stage0.backends.cascade.models import allowed_tokens, decoding
from antiphon.stage0.settings import Stage0Settings
from bench.gpu.models import make_dummy
from bench.gpu.speakable import PUNCTUATION, WORDS

QWEN = default_cache_dir() / "qwen2.5-coder-1.5b-instruct"


@pytest.mark.models
def test_a_dummy_folder_holds_its_tokenizers_words_punctuation_and_end_of_turn(
    tmp_path: Path,
) -> None:
    folder = make_dummy(QWEN, "tiny", tmp_path / "tiny")
    ids = allowed_tokens(folder / "speakable_tokens.json")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    pieces = [tokenizer.id_to_token(i) for i in ids]
    texts = [tokenizer.decode([i]) for i in ids]
    words = {w.lower() for w in WORDS}
    punctuation = [t for t in texts if PUNCTUATION.fullmatch(t)]
    spoken = [t for t in texts if t.startswith(" ") and t[1:].lower() in words]
    assert "<|im_end|>" in pieces
    assert {" the", " Paris", ".", ","} <= set(texts)
    # Nothing else: no code, no emoji, no word without its space.
    assert len(punctuation) + len(spoken) + 1 == len(ids)
    # About one token in ten ends a clause, as in a spoken answer.
    assert 0.05 < len(punctuation) / len(ids) < 0.15


@pytest.mark.parametrize("content", ["[]", "{}", "[1, -2]", '["3"]', "[1.5]", "[true]"])
def test_stage0_refuses_an_allowed_tokens_file_that_is_not_a_list_of_ids(
    tmp_path: Path, content: str
) -> None:
    path = tmp_path / "ids.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="token ids"):
        allowed_tokens(path)


def test_the_worker_decodes_every_answer_with_the_files_ids(tmp_path: Path) -> None:
    path = tmp_path / "ids.json"
    path.write_text(json.dumps([5, 0, 151645]))
    assert decoding(Stage0Settings()).allowed_token_ids is None
    held = decoding(Stage0Settings(llm_allowed_tokens_file=path))
    assert held.allowed_token_ids == (5, 0, 151645)
