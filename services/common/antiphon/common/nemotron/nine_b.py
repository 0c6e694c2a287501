"""`random:9b`: Nemotron VoiceChat at the published model's shape, random
weights, for benchmarks (what a step costs, not what it says).

What is the published shape, and what is assumed:

- The LLM is exact: Nemotron-Nano-9B-v2 (the checkpoints' `pretrained_llm`),
  56 NemotronH blocks (27 Mamba2, 4 attention, 25 MLP) at width 4,480, its
  131,072-token vocabulary (tiny.py's tokenizer filled to that size).
- The TTS backbone is the published Gemma3 shape (width 1,152, 28 layers, 16
  heads of 72, MLP 4,608) and its codec's quantizer (31 codebooks of 1,024,
  latents of 512, 1,764 samples a frame at 22,050 Hz): the sizes vLLM-Omni's
  configuration for this model reads.
- Assumed, no published config being at hand here: the audio encoder, a
  cache-aware streaming FastConformer of Nemotron Speech Streaming 0.6B's size
  (24 layers at width 1,024, 128 mel features); the codec's convolution
  widths; the TTS's character encoder and mixture head sizes. Each is a small
  share of a step beside the LLM's 9B parameters.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from antiphon.common.nemotron import tiny

VOCAB_SIZE = 131_072
LLM_HIDDEN = 4_480
# Nemotron-Nano-9B-v2's blocks: M a Mamba2 mixer, * attention, - an MLP.
PATTERN = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}
TTS_HIDDEN = 1_152


def write(folder: Path) -> None:
    """The checkpoint's config files into `folder` (no weights: random)."""
    llm = folder / tiny.LLM_FOLDER
    llm.mkdir(parents=True, exist_ok=True)
    tiny._tokenizer(llm, VOCAB_SIZE)
    tiny._llm_config(llm, VOCAB_SIZE, LLM_SHAPE)
    (folder / "config.json").write_text(json.dumps(config(), indent=1))


# Nemotron-Nano-9B-v2's LLM.
LLM_SHAPE: dict[str, Any] = {
    "hidden_size": LLM_HIDDEN,
    "layers_block_type": [_BLOCKS[b] for b in PATTERN],
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 15_680,
    "mamba_num_heads": 128,
    "mamba_head_dim": 80,
    "ssm_state_size": 128,
    "n_groups": 8,
    "chunk_size": 128,
    "mlp_hidden_act": "relu2",
    "max_position_embeddings": 131_072,
}


def config() -> dict[str, Any]:
    """tiny.py's config with the published (and the assumed) sizes."""
    cfg = copy.deepcopy(tiny.config())
    stt = cfg["model"]["stt"]["model"]
    stt["inference_pad_boost"] = 0.0
    # The published checkpoints call tools: a function head beside the text head.
    stt["use_function_head"] = True
    perception = stt["perception"]
    perception["preprocessor"]["features"] = 128
    perception["encoder"] |= {
        "feat_in": 128,
        "d_model": 1_024,
        "n_heads": 8,
        "n_layers": 24,
        "subsampling_conv_channels": 256,
        "ff_expansion_factor": 4,
        "att_context_size": [70, 0],
    }
    perception["modality_adapter"]["d_model"] = 1_024
    perception["output_dim"] = LLM_HIDDEN
    tts = cfg["model"]["speech_generation"]["model"]
    backbone = {
        "hidden_size": TTS_HIDDEN,
        "intermediate_size": 4_608,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 72,
        "sliding_window": 7_500,
        "vocab_size": 16,
        "use_cache": False,
    }
    codec = {"latent_size": 512, "codebook_size": 1_024, "num_quantizers": 31}
    tts["codec_config"] |= codec | {"base_hidden_size": 64, "n_fft": 64}
    tts_config = tts["tts_config"]
    tts_config |= codec | {"backbone_config": backbone}
    encoder = {**backbone, "num_hidden_layers": 2, "intermediate_size": 2_304}
    tts_config["cas_config"]["backbone_config"]["encoder"] = encoder
    tts_config["mog_head_config"] |= {"intermediate_size": 1_024, "num_layers": 2, "low_rank": 64}
    return cfg
