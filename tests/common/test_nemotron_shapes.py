"""The random Nemotron VoiceChat shapes: `random:9b`'s LLM is Nemotron-Nano-9B-v2's
(built on the meta device: no memory), its tokenizer covers the LLM's whole
vocabulary, and an unknown shape is refused by name."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from antiphon.common.nemotron import checkpoint, nine_b, tiny


@pytest.fixture(scope="module")
def nine() -> checkpoint.Checkpoint:
    return checkpoint.resolve("random:9b")


def test_the_9b_llm_is_nemotron_nano_9b_v2_s_shape(nine: checkpoint.Checkpoint) -> None:
    cfg = AutoConfig.from_pretrained(str(nine.folder / tiny.LLM_FOLDER))
    blocks = list(cfg.layers_block_type)
    counts = {kind: blocks.count(kind) for kind in set(blocks)}
    assert counts == {"linear_attention": 27, "full_attention": 4, "mlp": 25}
    with torch.device("meta"):
        llm = AutoModelForCausalLM.from_config(cfg)
    params = sum(p.numel() for p in llm.parameters())
    assert 8.8e9 < params < 8.95e9, params  # the published 8.89B
    stt = nine.config["model"]["stt"]["model"]
    assert stt["use_function_head"] and stt["perception"]["output_dim"] == cfg.hidden_size
    assert (nine.input_rate, nine.output_rate, nine.frame_ms) == (16_000, 22_050, 80)


def test_its_tokenizer_decodes_every_id_the_llm_can_say_and_encodes_as_tiny_s(
    nine: checkpoint.Checkpoint, tmp_path_factory: pytest.TempPathFactory
) -> None:
    filled = AutoTokenizer.from_pretrained(str(nine.folder / tiny.LLM_FOLDER))
    assert len(filled) == nine_b.VOCAB_SIZE
    assert str(filled.decode([nine_b.VOCAB_SIZE - 1])).strip()
    folder = tmp_path_factory.mktemp("tiny-tokenizer")
    tiny._tokenizer(folder)
    small = AutoTokenizer.from_pretrained(str(folder))
    text = "please call the function get weather for paris"
    assert filled.encode(text) == small.encode(text)
    for special in ("<SPECIAL_20>", "<SPECIAL_21>", "</s>"):
        assert filled.convert_tokens_to_ids(special) == small.convert_tokens_to_ids(special)


def test_an_unknown_random_shape_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: tiny, 9b"):
        checkpoint.resolve("random:70b")


@pytest.mark.models
def test_random_weights_whose_constructor_fails_on_the_device_are_built_on_the_cpu(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Random weights are drawn on the device asked for (9B drawn by torch's
    CPU generator took a minute); the meta device stands in for one where a
    constructor of NeMo's fails (both halves read a value, `.item()`, which
    meta cannot): each half is built on the CPU instead, said so, and moved."""
    small = checkpoint.resolve("random:tiny")
    with caplog.at_level(logging.WARNING, logger=checkpoint.__name__):
        tts = small.tts("meta")
        stt = small.stt("meta")
    said = [r.getMessage() for r in caplog.records if r.name == checkpoint.__name__]
    assert [m.startswith("random:tiny: built on the CPU, not meta:") for m in said] == [True] * 2
    devices = {t.device.type for m in (tts, stt) for t in [*m.parameters(), *m.buffers()]}
    assert devices == {"meta"}
