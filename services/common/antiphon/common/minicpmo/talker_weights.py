"""MiniCPM-o 4.5's talker (`MiniCPMTTS`): its configuration, the names and
shapes of its weights in the published checkpoint, and random ones for
tests.

The talker is a Llama `LlamaModel` that turns the thinker's text of one
1-second unit into 25 S3 codec tokens. Its configuration is the `tts_config`
dict of the checkpoint's `config.json`; its weights sit beside the
thinker's under the prefix `tts.` (vLLM's thinker loader skips that prefix):

- `emb_text`: the talker's own table of the thinker's token ids;
- `projector_semantic`: Linear(thinker width -> width), ReLU, Linear(width ->
  width), from the thinker's final hidden state of a token;
- `emb_code.0` / `head_code.0`: the codec's table and head (`num_vq` 1), the
  head stored weight-normed (`parametrizations.weight.original0` the norms
  `[codes, 1]`, `original1` the directions `[codes, width]`);
- `model.*`: the Llama layers and final norm.

The published module also holds `projector_spk` and the Llama's own
`model.embed_tokens`, which the duplex talker never reads; they are not
written here and are ignored where present.

Defaults are the published 4.5 talker's as read from the official code and a
third-party convert script (hidden 768, 20 layers, 12 heads); the published
`config.json` itself was not at hand, nor were its `audio_bos_token_id` and
`text_eos_token_id`, which are vllm-omni's fallbacks here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from antiphon.common.assets import MissingAssetError

if TYPE_CHECKING:
    from collections.abc import Mapping

    import torch

    from antiphon.common.minicpmo.config import MiniCPMOConfig

CONFIG_KEY = "tts_config"
PREFIX = "tts."
# Where the random talkers' weights go, beside the thinker's `model.safetensors`.
WEIGHTS_FILE = "talker.safetensors"
HEAD_NORMS = PREFIX + "head_code.0.parametrizations.weight.original0"
HEAD_DIRECTIONS = PREFIX + "head_code.0.parametrizations.weight.original1"
# The official code builds its LlamaConfig from these fields alone, so the
# rest are transformers' Llama defaults, which the weights were trained with.
ROPE_THETA = 10_000.0
RMS_NORM_EPS = 1e-6
# A thinker 4.5's width (Qwen3-8B), which projector_semantic projects from.
THINKER_WIDTH = 4_096

Shapes = dict[str, tuple[int, ...]]
_SEED = 4502
_STD = 0.02


@dataclass(frozen=True)
class TalkerConfig:
    """The `tts_config` fields the duplex talker reads, with the 4.5 defaults."""

    llm_dim: int = THINKER_WIDTH
    hidden_size: int = 768
    intermediate_size: int = 3_072
    num_hidden_layers: int = 20
    num_attention_heads: int = 12
    num_key_value_heads: int = 12
    max_position_embeddings: int = 4_096
    num_text_tokens: int = 152_064
    # 6561 S3 codes and the codec's EOS after them.
    num_audio_tokens: int = 6_562
    num_vq: int = 1
    audio_bos_token_id: int = 151_687
    text_eos_token_id: int = 151_692
    normalize_projected_hidden: bool = True

    def __post_init__(self) -> None:
        if self.num_vq != 1:
            raise ValueError(f"the talker has one codebook (num_vq 1), not {self.num_vq}")
        if self.hidden_size % self.num_attention_heads:
            heads = self.num_attention_heads
            raise ValueError(f"width {self.hidden_size} is not a multiple of {heads} heads")
        for name in ("audio_bos_token_id", "text_eos_token_id"):
            if not 0 <= getattr(self, name) < self.num_text_tokens:
                raise ValueError(f"{name} is outside the talker's {self.num_text_tokens} ids")

    @property
    def eos(self) -> int:
        """The codec's end of speech, the last code."""
        return self.num_audio_tokens - 1

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any]) -> TalkerConfig:
        """The fields of a `tts_config` this class names; the published file's
        others (streaming windows, loss weights, ...) are the trainer's."""
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in settings.items() if key in names})


# The tiny talker's shape: TalkerConfig's fields beside the thinker's width
# and vocabulary, which come from the tiny thinker.
TINY_SHAPE: dict[str, int] = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
}


def talker_config(thinker: MiniCPMOConfig, *, tiny: bool = False) -> TalkerConfig:
    """The talker that hears `thinker`: the published one (its own text
    table, 152,064 ids), or with `tiny` the toy shape over the thinker's
    vocabulary, its last two ids standing for audio_bos and text_eos."""
    if not tiny:
        return TalkerConfig(llm_dim=thinker.hidden_size)
    vocab = thinker.vocab_size
    return TalkerConfig.from_dict(
        TINY_SHAPE
        | {
            "llm_dim": thinker.hidden_size,
            "num_text_tokens": vocab,
            "audio_bos_token_id": vocab - 2,
            "text_eos_token_id": vocab - 1,
        }
    )


def read_config(checkpoint: Mapping[str, Any]) -> TalkerConfig:
    """The talker of a checkpoint's parsed `config.json`; MissingAssetError
    when it has no `tts_config`."""
    settings = checkpoint.get(CONFIG_KEY)
    if not isinstance(settings, dict):
        raise MissingAssetError("MiniCPM-o talker", f"config.json has no {CONFIG_KEY}")
    return TalkerConfig.from_dict(settings)


def write_config(folder: Path, cfg: TalkerConfig) -> None:
    """`cfg` as the `tts_config` of the folder's `config.json`, the file's
    other keys kept (so after the thinker's configuration is written)."""
    path = folder / "config.json"
    settings = json.loads(path.read_text()) if path.is_file() else {}
    settings[CONFIG_KEY] = cfg.to_dict()
    path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def shapes(cfg: TalkerConfig) -> Shapes:
    """Every tensor the duplex talker reads, by its published name."""
    width, mlp, codes = cfg.hidden_size, cfg.intermediate_size, cfg.num_audio_tokens
    q = cfg.num_attention_heads * cfg.head_dim
    kv = cfg.num_key_value_heads * cfg.head_dim
    out: Shapes = {
        PREFIX + "emb_text.weight": (cfg.num_text_tokens, width),
        PREFIX + "emb_code.0.weight": (codes, width),
        HEAD_NORMS: (codes, 1),
        HEAD_DIRECTIONS: (codes, width),
        PREFIX + "projector_semantic.linear1.weight": (width, cfg.llm_dim),
        PREFIX + "projector_semantic.linear1.bias": (width,),
        PREFIX + "projector_semantic.linear2.weight": (width, width),
        PREFIX + "projector_semantic.linear2.bias": (width,),
        PREFIX + "model.norm.weight": (width,),
    }
    for i in range(cfg.num_hidden_layers):
        layer = f"{PREFIX}model.layers.{i}."
        out |= {
            layer + "self_attn.q_proj.weight": (q, width),
            layer + "self_attn.k_proj.weight": (kv, width),
            layer + "self_attn.v_proj.weight": (kv, width),
            layer + "self_attn.o_proj.weight": (width, q),
            layer + "mlp.gate_proj.weight": (mlp, width),
            layer + "mlp.up_proj.weight": (mlp, width),
            layer + "mlp.down_proj.weight": (width, mlp),
            layer + "input_layernorm.weight": (width,),
            layer + "post_attention_layernorm.weight": (width,),
        }
    return out


def random(cfg: TalkerConfig) -> dict[str, torch.Tensor]:
    """The tensors of `shapes(cfg)` from a fixed seed: matrices normal (std
    0.02), norms one, biases zero, the head's norms its directions' own (the
    stored form of a plain random head)."""
    import torch

    generator = torch.Generator().manual_seed(_SEED)
    out: dict[str, torch.Tensor] = {}
    for name, shape in sorted(shapes(cfg).items()):
        if name == HEAD_NORMS:
            continue
        if name.endswith("bias"):
            out[name] = torch.zeros(shape)
        elif name.endswith("norm.weight"):
            out[name] = torch.ones(shape)
        else:
            out[name] = torch.randn(shape, generator=generator) * _STD
    out[HEAD_NORMS] = out[HEAD_DIRECTIONS].norm(dim=1, keepdim=True)
    return out


def write(cfg: TalkerConfig, path: Path) -> None:
    """`random(cfg)` as one safetensors file at `path`."""
    from safetensors.torch import save_file

    save_file(random(cfg), str(path))


def write_tiny_talker(folder: Path, thinker: MiniCPMOConfig) -> TalkerConfig:
    """The tiny talker of `thinker` into `folder`: its `tts_config` into
    `config.json` (written after the thinker's) and its random weights into
    `talker.safetensors`."""
    cfg = talker_config(thinker, tiny=True)
    folder.mkdir(parents=True, exist_ok=True)
    write_config(folder, cfg)
    write(cfg, folder / WEIGHTS_FILE)
    return cfg
