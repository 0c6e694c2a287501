"""`random:tiny`: a MiniCPM-o 4.5 thinker small enough for a CPU test,
written as a checkpoint folder in the published layout.

Every part keeps its real kind at toy size: a two-layer Qwen3 LLM 128 wide
(the resampler's heads are 128 wide, so no narrower), a one-layer SigLIP and
a one-layer Whisper encoder 32 wide; the real front ends (Whisper's 80 mel
bins at 16 kHz, 14-pixel patches, slices of 448 pixels, audio pooled by 5
into one token per 100 ms) so that a second of audio and a camera frame
cost the prompt what they cost the published model, but for the resampler's
16 queries (the published 64) per image slice.

The folder holds what vLLM reads: `config.json`, random weights
(`model.safetensors`), a byte-level BPE tokenizer trained here on a fixed
corpus with MiniCPM-o's special tokens, and `preprocessor_config.json` (the
image processor and Whisper's feature extractor). The published folder's
tokenizer and image processor are remote code; vLLM loads an image
processor only that way (`auto_map`, with `trust_remote_code`), so the
folder's two code files are one import each, of this package's classes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from antiphon.common.minicpmo import tokenizer as tok

if TYPE_CHECKING:
    from antiphon.common.minicpmo.config import MiniCPMOConfig

TOKENIZER_MODULE = "tokenization_minicpmo_fast"
IMAGE_PROCESSOR_MODULE = "image_processing_minicpmv"
INPUT_RATE = 16_000
# Where the published folder keeps token2wav's files.
TOKEN2WAV_FOLDER = Path("assets") / "token2wav"
_CORPUS = [
    "hello there how can I help you today",
    "the weather is sunny and warm",
    "what do you see in the picture",
    "I hear you, go on",
    "thank you goodbye",
]

# The tiny thinker's shape (MiniCPMOConfig's fields beside the vocabulary).
SHAPE: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
    "query_num": 16,
    "vision_config": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": 980,
        "patch_size": 14,
    },
    "audio_config": {
        "d_model": 32,
        "encoder_layers": 1,
        "encoder_attention_heads": 2,
        # A quarter of it is what vLLM projects into the LLM (d_model here).
        "encoder_ffn_dim": 128,
        "decoder_layers": 1,
        "decoder_attention_heads": 2,
        "decoder_ffn_dim": 128,
        "num_mel_bins": 80,
        "max_source_positions": 1500,
    },
}


def write(folder: Path) -> None:
    """The tiny checkpoint into `folder`: config, tokenizer, processors, the
    thinker's weights, the talker's (talker_weights.py) and token2wav's
    folder (token2wav_assets.py)."""
    from antiphon.common.minicpmo import talker_weights, token2wav_assets, weights

    folder.mkdir(parents=True, exist_ok=True)
    vocab = write_tokenizer(folder)
    cfg = config(vocab, SHAPE)
    write_config(folder, cfg)
    write_processors(folder, cfg)
    weights.write(cfg, folder / "model.safetensors")
    talker_weights.write_tiny_talker(folder, cfg)
    token2wav_assets.write_tiny(folder / TOKEN2WAV_FOLDER)


def config(vocab_size: int, shape: dict[str, Any]) -> MiniCPMOConfig:
    """MiniCPMOConfig of `shape` over a vocabulary of `vocab_size`."""
    from antiphon.common.minicpmo.config import MiniCPMOConfig

    return MiniCPMOConfig(
        vocab_size=vocab_size,
        tie_word_embeddings=False,
        drop_vision_last_layer=False,
        # The published folder's slicing, which the processor reads.
        slice_config={"max_slice_nums": 9, "patch_size": 14, "scale_resolution": 448},
        slice_mode=True,
        architectures=["MiniCPMO"],
        **shape,
    )


def write_config(folder: Path, cfg: MiniCPMOConfig) -> None:
    cfg.save_pretrained(str(folder))


def write_tokenizer(folder: Path, vocab_size: int | None = None) -> int:
    """The BPE tokenizer into `folder`, its size returned; with `vocab_size`,
    filled to that many ids with tokens no text encodes to (a random model
    of the real vocabulary: every id it can say decodes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from antiphon.common.minicpmo.tokenizer import MiniCPMOTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=tok.UNK))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=tok.SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_CORPUS * 20, trainer)
    if vocab_size is not None:
        spec = json.loads(bpe.to_str())
        vocab: dict[str, int] = dict(spec["model"]["vocab"])
        merges = [(a, b) for a, b in spec["model"]["merges"]]
        # Byte-level characters only ("Ġ" is the space), so the decoder maps them back.
        vocab |= {f"Ġfill{i}": i for i in range(len(vocab), vocab_size)}
        filled = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=tok.UNK))
        filled.pre_tokenizer, filled.decoder = bpe.pre_tokenizer, bpe.decoder
        filled.add_special_tokens(tok.SPECIALS)
        bpe = filled
    fast = MiniCPMOTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=bpe, unk_token=tok.UNK, eos_token=tok.IM_END, pad_token=tok.END_OF_TEXT
    )
    fast.save_pretrained(str(folder))
    _code_file(folder, TOKENIZER_MODULE, "tokenizer", "MiniCPMOTokenizerFast")
    path = folder / "tokenizer_config.json"
    settings = json.loads(path.read_text())
    settings["tokenizer_class"] = "MiniCPMOTokenizerFast"
    settings["auto_map"] = {"AutoTokenizer": [None, f"{TOKENIZER_MODULE}.MiniCPMOTokenizerFast"]}
    path.write_text(json.dumps(settings, indent=1))
    return len(fast)


def write_processors(folder: Path, cfg: MiniCPMOConfig) -> None:
    """`preprocessor_config.json`: the image processor's settings beside
    Whisper's feature extractor's (one file holds both, as published)."""
    _code_file(folder, IMAGE_PROCESSOR_MODULE, "image_processor", "MiniCPMVImageProcessor")
    slicing = cfg.slice_config or {}
    settings = {
        # vLLM builds its own MiniCPMOProcessor (vllm.transformers_utils.processors).
        "processor_class": "MiniCPMOProcessor",
        "image_processor_type": "MiniCPMVImageProcessor",
        "auto_map": {"AutoImageProcessor": f"{IMAGE_PROCESSOR_MODULE}.MiniCPMVImageProcessor"},
        "max_slice_nums": slicing["max_slice_nums"],
        "scale_resolution": slicing["scale_resolution"],
        "patch_size": cfg.vision.patch_size,
        "image_feature_size": cfg.query_num,
        "use_image_id": cfg.use_image_id,
        "slice_mode": True,
        "norm_mean": [0.5, 0.5, 0.5],
        "norm_std": [0.5, 0.5, 0.5],
        "version": float(cfg.version),
        "feature_extractor_type": "WhisperFeatureExtractor",
        "feature_size": cfg.audio.num_mel_bins,
        "sampling_rate": INPUT_RATE,
        "hop_length": 160,
        "chunk_length": 30,
        "n_fft": 400,
        "padding_value": 0.0,
        "padding_side": "right",
        "return_attention_mask": False,
    }
    (folder / "preprocessor_config.json").write_text(json.dumps(settings, indent=1))


def _code_file(folder: Path, module: str, ours: str, name: str) -> None:
    """The folder's remote-code module `module`: an import of our class."""
    text = (
        f'"""MiniCPM-o\'s {ours.replace("_", " ")}: antiphon.common.minicpmo.{ours}."""\n\n'
        f"from antiphon.common.minicpmo.{ours} import {name}\n\n"
        f'__all__ = ["{name}"]\n'
    )
    (folder / f"{module}.py").write_text(text)
