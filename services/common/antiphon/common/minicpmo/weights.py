"""Random weights for a MiniCPM-o thinker, under the published checkpoint's
tensor names (the ones vLLM's `MiniCPMO4_5.load_weights` maps), in the shapes
a configuration gives.

The parts and their prefixes: `llm.` the Qwen3 LLM, `vpm.` SigLIP (its
patch embedding, encoder layers and final norm), `resampler.` the queries
that turn an image slice into `query_num` tokens, `apm.` Whisper's encoder,
`audio_projection_layer.` its projection into the LLM's width. The talker
(`tts.`) is not the thinker's and is not written.

Drawn from one seed, so that every process writes the same model: matrices
normal with standard deviation 0.02, norms' weights one, biases zero.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from antiphon.common.minicpmo.config import MiniCPMOConfig

Shapes = dict[str, tuple[int, ...]]
_SEED = 4501
_STD = 0.02


def shapes(cfg: MiniCPMOConfig) -> Shapes:
    """Every tensor of the thinker `cfg` describes, by its published name."""
    return _llm(cfg) | _vision(cfg) | _resampler(cfg) | _audio(cfg)


def _llm(cfg: MiniCPMOConfig) -> Shapes:
    hidden, head, mlp = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    q = cfg.num_attention_heads * head
    kv = (cfg.num_key_value_heads or cfg.num_attention_heads) * head
    out: Shapes = {"llm.model.embed_tokens.weight": (cfg.vocab_size, hidden)}
    for i in range(cfg.num_hidden_layers):
        layer = f"llm.model.layers.{i}."
        out |= {
            layer + "self_attn.q_proj.weight": (q, hidden),
            layer + "self_attn.k_proj.weight": (kv, hidden),
            layer + "self_attn.v_proj.weight": (kv, hidden),
            layer + "self_attn.o_proj.weight": (hidden, q),
            layer + "self_attn.q_norm.weight": (head,),
            layer + "self_attn.k_norm.weight": (head,),
            layer + "mlp.gate_proj.weight": (mlp, hidden),
            layer + "mlp.up_proj.weight": (mlp, hidden),
            layer + "mlp.down_proj.weight": (hidden, mlp),
            layer + "input_layernorm.weight": (hidden,),
            layer + "post_attention_layernorm.weight": (hidden,),
        }
    out["llm.model.norm.weight"] = (hidden,)
    if not cfg.tie_word_embeddings:
        out["llm.lm_head.weight"] = (cfg.vocab_size, hidden)
    return out


def _vision(cfg: MiniCPMOConfig) -> Shapes:
    vc = cfg.vision
    # SigLIP's sizes may be pairs; MiniCPM's are square.
    width, patch, side = vc.hidden_size, vc.patch_size, vc.image_size
    assert isinstance(patch, int) and isinstance(side, int)
    out: Shapes = {
        "vpm.embeddings.patch_embedding.weight": (width, vc.num_channels, patch, patch),
        "vpm.embeddings.patch_embedding.bias": (width,),
        "vpm.embeddings.position_embedding.weight": ((side // patch) ** 2, width),
        "vpm.post_layernorm.weight": (width,),
        "vpm.post_layernorm.bias": (width,),
    }
    for i in range(vc.num_hidden_layers):
        layer = f"vpm.encoder.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out[f"{layer}self_attn.{proj}.weight"] = (width, width)
            out[f"{layer}self_attn.{proj}.bias"] = (width,)
        for norm in ("layer_norm1", "layer_norm2"):
            out[f"{layer}{norm}.weight"] = out[f"{layer}{norm}.bias"] = (width,)
        out |= {
            layer + "mlp.fc1.weight": (vc.intermediate_size, width),
            layer + "mlp.fc1.bias": (vc.intermediate_size,),
            layer + "mlp.fc2.weight": (width, vc.intermediate_size),
            layer + "mlp.fc2.bias": (width,),
        }
    return out


def _resampler(cfg: MiniCPMOConfig) -> Shapes:
    embed, kv = cfg.hidden_size, cfg.vision.hidden_size
    out: Shapes = {
        "resampler.query": (cfg.query_num, embed),
        "resampler.attn.in_proj_weight": (3 * embed, embed),
        "resampler.attn.in_proj_bias": (3 * embed,),
        "resampler.attn.out_proj.weight": (embed, embed),
        "resampler.attn.out_proj.bias": (embed,),
        "resampler.proj": (embed, embed),
    }
    if kv != embed:  # else the resampler has no projection of its keys
        out["resampler.kv_proj.weight"] = (embed, kv)
    for norm in ("ln_q", "ln_kv", "ln_post"):
        out[f"resampler.{norm}.weight"] = out[f"resampler.{norm}.bias"] = (embed,)
    return out


def _audio(cfg: MiniCPMOConfig) -> Shapes:
    ac = cfg.audio
    width, ffn = ac.d_model, ac.encoder_ffn_dim
    out: Shapes = {
        "apm.conv1.weight": (width, ac.num_mel_bins, 3),
        "apm.conv1.bias": (width,),
        "apm.conv2.weight": (width, width, 3),
        "apm.conv2.bias": (width,),
        "apm.embed_positions.weight": (ac.max_source_positions, width),
        "apm.layer_norm.weight": (width,),
        "apm.layer_norm.bias": (width,),
        # vLLM projects a quarter of the encoder's MLP width (its d_model in
        # the published Whisper-medium) into the LLM's.
        "audio_projection_layer.linear1.weight": (cfg.hidden_size, ffn // 4),
        "audio_projection_layer.linear1.bias": (cfg.hidden_size,),
        "audio_projection_layer.linear2.weight": (cfg.hidden_size, cfg.hidden_size),
        "audio_projection_layer.linear2.bias": (cfg.hidden_size,),
    }
    for i in range(ac.encoder_layers):
        layer = f"apm.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out[f"{layer}self_attn.{proj}.weight"] = (width, width)
            if proj != "k_proj":  # Whisper's keys have no bias
                out[f"{layer}self_attn.{proj}.bias"] = (width,)
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            out[f"{layer}{norm}.weight"] = out[f"{layer}{norm}.bias"] = (width,)
        out |= {
            layer + "fc1.weight": (ffn, width),
            layer + "fc1.bias": (ffn,),
            layer + "fc2.weight": (width, ffn),
            layer + "fc2.bias": (width,),
        }
    return out


def _is_norm(name: str) -> bool:
    return any(key in name for key in ("norm", "ln_q", "ln_kv", "ln_post"))


def random(cfg: MiniCPMOConfig) -> dict[str, torch.Tensor]:
    """The tensors of `shapes(cfg)`, drawn from the fixed seed."""
    import torch

    generator = torch.Generator().manual_seed(_SEED)
    out: dict[str, torch.Tensor] = {}
    for name, shape in sorted(shapes(cfg).items()):
        if name.endswith("bias"):
            out[name] = torch.zeros(shape)
        elif _is_norm(name):
            out[name] = torch.ones(shape)
        else:
            out[name] = torch.randn(shape, generator=generator) * _STD
    return out


def write(cfg: MiniCPMOConfig, path: Path) -> None:
    """`random(cfg)` as one safetensors file at `path`."""
    from safetensors.torch import save_file

    save_file(random(cfg), str(path))
