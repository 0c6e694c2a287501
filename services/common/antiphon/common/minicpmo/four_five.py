"""`random:4.5`: MiniCPM-o 4.5's thinker at the published shapes, no weights
(vLLM draws them: `load_format="dummy"`), for benchmarks: what a unit
costs, not what it says.

The parts are the ones the model card names, at their public shapes:

- LLM: Qwen3-8B (36 layers at width 4,096, 32 query and 8 key/value heads of
  128, MLP 12,288, RoPE theta 1,000,000), its 151,936-token vocabulary
  (tiny.py's tokenizer filled to that size).
- Vision: SigLIP so400m at patch 14 (27 layers at width 1,152, 16 heads, MLP
  4,304, positions for 980 pixels), the resampler's 64 queries a slice.
- Audio: Whisper-medium's encoder (24 layers at width 1,024, 16 heads, MLP
  4,096, 80 mel bins), pooled by 5 (one token per 100 ms).

The voice (stage1) is the published talker (talker_weights.py) and
token2wav (token2wav_assets.py `write_published`), random too: the
talker's `tts_config` is in the config; `write_voice` writes token2wav's
folder, and the talker's weights are drawn where it loads (no weights file,
so vLLM still draws the thinker's).

Assumed, the published config.json not being at hand here: that SigLIP's
last layer is kept (`drop_vision_last_layer: false`) and that the thinker's
vocabulary is Qwen3's size; either changes a step's cost by well under 1%.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from antiphon.common.minicpmo import tiny

VOCAB_SIZE = 151_936

SHAPE: dict[str, Any] = {
    "hidden_size": 4_096,
    "intermediate_size": 12_288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40_960,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
    "query_num": 64,
    "vision_config": {
        "hidden_size": 1_152,
        "intermediate_size": 4_304,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "image_size": 980,
        "patch_size": 14,
    },
    "audio_config": {
        "d_model": 1_024,
        "encoder_layers": 24,
        "encoder_attention_heads": 16,
        "encoder_ffn_dim": 4_096,
        "decoder_layers": 24,
        "decoder_attention_heads": 16,
        "decoder_ffn_dim": 4_096,
        "num_mel_bins": 80,
        "max_source_positions": 1_500,
    },
}


def write(folder: Path) -> None:
    """The checkpoint's config (the talker's with it), tokenizer and
    processor files (no weights)."""
    from antiphon.common.minicpmo import talker_weights

    folder.mkdir(parents=True, exist_ok=True)
    tiny.write_tokenizer(folder, VOCAB_SIZE)
    cfg = tiny.config(VOCAB_SIZE, SHAPE)
    tiny.write_config(folder, cfg)
    tiny.write_processors(folder, cfg)
    talker_weights.write_config(folder, talker_weights.talker_config(cfg))


def write_voice(folder: Path) -> None:
    """Token2wav's random folder at the published widths, where the
    published checkpoint keeps it."""
    from antiphon.common.minicpmo import token2wav_assets

    token2wav_assets.write_published(folder / tiny.TOKEN2WAV_FOLDER)
