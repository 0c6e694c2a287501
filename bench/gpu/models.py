"""The model a GPU run serves: a catalogue model, a folder, or random weights of a
published shape (`--dummy`) with a real tokenizer, whose compute cost is the real one."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from antiphon.stage0.backends.cascade.llm import llm_models
from bench.gpu.speakable import write_speakable

# Hidden sizes of the dummy models (`--dummy`). The 8B class: Qwen2.5-7B and
# Llama-3.1-8B as published; "tiny" only checks the path on a CPU.
QWEN_7B = {
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "rope_theta": 1_000_000.0,
    "tie_word_embeddings": False,
}
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500_000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
}
TINY = {
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "max_window_layers": 2,
    "tie_word_embeddings": False,
}
SHAPES: dict[str, dict[str, Any]] = {"qwen2.5-7b": QWEN_7B, "llama-3.1-8b": LLAMA_8B, "tiny": TINY}
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
)


def base_folder(model: str, model_cache: Path) -> Path | None:
    """The folder `--model` names: a catalogue model's prepared folder, or a path."""
    packaged = llm_models.packaged(model)
    if packaged is not None:
        return model_cache / packaged.dirname
    return llm_models.local_folder(model)


def make_dummy(base: Path, shape: str, out: Path) -> Path:
    """A folder vLLM loads with random weights: `shape`'s config.json (or `base`'s own
    for "same"), `base`'s tokenizer, and the ids of the tokenizer's common words
    (`speakable_tokens.json`, speakable.py). The vocabulary never shrinks below the tokenizer's."""
    config = json.loads((base / "config.json").read_text())
    if shape != "same":
        over = dict(SHAPES[shape])
        vocab = max(int(over.get("vocab_size", 0)), int(config.get("vocab_size", 0)))
        if over.get("model_type", config.get("model_type")) != config.get("model_type"):
            # Another architecture: only the tokenizer's special ids carry over.
            keep = ("bos_token_id", "eos_token_id", "pad_token_id")
            config = {k: config[k] for k in keep if k in config}
        config.update(over, vocab_size=vocab)
        layers = int(config["num_hidden_layers"])
        if "layer_types" in config:
            config["layer_types"] = ["full_attention"] * layers
        if "rope_parameters" in config and "rope_theta" in over:
            config["rope_parameters"] = {
                **config["rope_parameters"],
                "rope_theta": over["rope_theta"],
            }
        config.pop("_model_name_or_path", None)
        config["head_dim"] = int(config["hidden_size"]) // int(config["num_attention_heads"])
    # Both spellings: transformers 5 writes "dtype", older readers look for "torch_dtype".
    config["dtype"] = config["torch_dtype"] = "bfloat16"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copyfile(base / name, out / name)
    write_speakable(out)
    return out


def params_b(config: dict[str, Any]) -> float:
    """Parameters of a dense decoder, in billions (for the results' model line)."""
    h, n = int(config["hidden_size"]), int(config["num_hidden_layers"])
    heads, kv = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = int(config.get("head_dim") or h // heads)
    inter, vocab = int(config["intermediate_size"]), int(config["vocab_size"])
    attn = h * head_dim * (heads + 2 * kv) + heads * head_dim * h
    per_layer = attn + 3 * h * inter
    embed = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return round((n * per_layer + embed) / 1e9, 2)


def resolve_model(args: argparse.Namespace) -> tuple[str, str]:
    """(what the worker loads, how the results name it)."""
    base = base_folder(args.model, args.model_cache)
    if not args.dummy:
        return (str(base) if base else args.model), args.model
    if base is None or not (base / "config.json").is_file():
        raise SystemExit(
            f"--dummy needs a folder with config.json and a tokenizer; {args.model} is none"
        )
    folder = make_dummy(base, args.dummy, args.dummy_dir / f"{args.dummy}-{base.name}")
    config = json.loads((folder / "config.json").read_text())
    arch = ",".join(config.get("architectures", []))
    shape = args.dummy if args.dummy != "same" else base.name
    name = (
        f"{shape} ({arch}, {params_b(config)}B params, dummy bf16 weights;"
        f" tokenizer of {base.name})"
    )
    return str(folder), name
