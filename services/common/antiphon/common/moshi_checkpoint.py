"""Which Moshi-architecture model a duplex worker serves, and how to build it.

One setting (`duplex_checkpoint`) names it, read the same way by stage0 (Mimi's
encoder and the LM) and stage1 (Mimi's decoder):

- a local folder in the layout the `moshi` loaders read (Moshi's and
  PersonaPlex's published checkpoints): `config.json` (optional, and empty in
  PersonaPlex's: moshi's 7B defaults), the LM weights, Mimi's weights and the
  text tokenizer under the names the config gives (or moshi's defaults).
  Nothing is downloaded: a missing file is a clear error. PersonaPlex's LM
  weights carry a 16-step depth transformer (it also predicts the user's
  codebooks); it is trimmed at load to the config's `dep_q` steps, which give
  the agent's codebooks unchanged (the depth transformer is causal over them).
- `random:7b`: the real shape (Helium 7B temporal transformer, depth
  transformer, full Mimi) with random weights, for capacity benchmarks.
- `random:tiny`: a tiny random configuration for tests (an LM of dim 64, two
  layers, a short context, a small Mimi at the real frame rate). Its text
  vocabulary is small, so a sampled random model pads often and "goes quiet"
  as a real one does between sentences.

Only the stage workers import this module; torch and moshi load inside the
functions that need them, so a gateway or session never pulls them in.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from antiphon.common.assets import RANDOM_PREFIX, MissingAssetError

if TYPE_CHECKING:
    import sentencepiece
    import torch
    from moshi.models.compression import MimiModel
    from moshi.models.lm import LMModel

# The Mimi codec's fixed facts (every Moshi-architecture checkpoint shares them).
SAMPLE_RATE = 24_000
FRAME_RATE_HZ = 12.5
FRAME_SAMPLES = int(SAMPLE_RATE / FRAME_RATE_HZ)  # 1920: one 80 ms frame
FRAME_MS = int(1000 / FRAME_RATE_HZ)  # 80

# Random Mimi weights are drawn from this seed, so that the encoder (stage0)
# and the decoder (stage1) of a random checkpoint are one codec.
RANDOM_MIMI_SEED = 1234
# moshi's default file names inside a checkpoint folder (loaders.py).
LM_FILE = "model.safetensors"
MIMI_FILE = "tokenizer-e351c8d8-checkpoint125.safetensors"
TOKENIZER_FILE = "tokenizer_spm_32k_3.model"

# Eight text tokens: 0 (end of padding) and 3 (padding) say nothing, so a
# sampled random model is quiet about a quarter of its frames.
TINY_TEXT_CARD = 8
# Overrides of moshi's 7B LM config (loaders._lm_kwargs) for `random:tiny`.
_TINY_LM = {
    "dim": 64,
    "num_heads": 4,
    "num_layers": 2,
    "hidden_scale": 2,
    "text_card": TINY_TEXT_CARD,
    "card": 32,
    # Frames the temporal transformer attends to: short, so a test call runs
    # past it many times over.
    "context": 16,
    "depformer_dim": 32,
    "depformer_dim_feedforward": 64,
    "depformer_num_heads": 2,
    "depformer_num_layers": 1,
}
_TINY_MIMI_SEANET = {"n_filters": 4, "dimension": 32}
_TINY_MIMI_QUANTIZER = {"dimension": 16, "bins": 32, "input_dimension": 32, "output_dimension": 32}
_TINY_MIMI_TRANSFORMER = {
    "d_model": 32,
    "num_heads": 2,
    "num_layers": 1,
    "dim_feedforward": 64,
    "input_dimension": 32,
    "output_dimensions": [32],
}


@dataclass(frozen=True)
class Checkpoint:
    """A resolved `duplex_checkpoint`: the files to load (None: random weights)
    and the configs to build with (None: moshi's own defaults, Moshi 7B)."""

    name: str
    lm_weights: Path | None
    mimi_weights: Path | None
    tokenizer: Path | None
    lm_config: dict[str, Any] | None
    mimi_config: dict[str, Any] | None
    # Generation defaults the checkpoint ships (`lm_gen_config`), e.g. temperatures.
    lm_gen_config: dict[str, Any] = field(default_factory=dict)

    @property
    def random(self) -> bool:
        return self.lm_weights is None

    @property
    def num_codebooks(self) -> int:
        """Audio codebooks per frame each way (8 for Moshi and PersonaPlex)."""
        if self.lm_config is None:
            return 8
        return int(self.lm_config.get("dep_q", 8))

    @functools.cached_property
    def depformer_steps(self) -> int:
        """Steps of the depth transformer the LM weights carry (read from the
        file's key names, no tensor loaded): `num_codebooks` for Moshi, 16 for
        PersonaPlex's, which also predict the user's codebooks."""
        if self.lm_weights is None:
            return self.num_codebooks
        return depformer_steps(_safetensors_keys(self.lm_weights))

    @property
    def personaplex(self) -> bool:
        """The weights are PersonaPlex-shaped (a depth transformer over both
        streams): it was trained with a voice and text prompt before the call."""
        return self.depformer_steps > self.num_codebooks

    def lm(self, device: str | torch.device, dtype: torch.dtype) -> LMModel:
        from moshi.models import loaders

        if self.lm_weights is None:
            model = loaders.get_moshi_lm(
                None, lm_kwargs=copy.deepcopy(self.lm_config), device=device, dtype=dtype
            )
        else:
            model = _load_lm(self.lm_weights, self.lm_config, device, dtype)
        model.eval()
        return model

    def mimi(self, device: str | torch.device) -> MimiModel:
        """Mimi. With random weights, the same Mimi in every process (stage0
        encodes with it, stage1 decodes), with codebooks that tell inputs apart."""
        from moshi.models import loaders

        if self.mimi_weights is not None:
            model = loaders.get_mimi(
                str(self.mimi_weights),
                copy.deepcopy(self.mimi_config),
                device=device,
                num_codebooks=self.num_codebooks,
            )
            model.eval()
            return model
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(RANDOM_MIMI_SEED)
            model = loaders.get_mimi(
                None,
                copy.deepcopy(self.mimi_config),
                device="cpu",
                num_codebooks=self.num_codebooks,
            )
            _fill_codebooks(model)
        model.eval()
        return model.to(device)

    def text_tokenizer(self) -> sentencepiece.SentencePieceProcessor | None:
        """The text tokenizer; None for random weights (ids are spelled out)."""
        if self.tokenizer is None:
            return None
        import sentencepiece

        return sentencepiece.SentencePieceProcessor(str(self.tokenizer))


def resolve(name: str) -> Checkpoint:
    """The checkpoint `name` names; raises MissingAssetError for a folder that
    lacks a file (nothing is ever downloaded)."""
    if name.startswith(RANDOM_PREFIX):
        return _random(name)
    return _folder(Path(name).expanduser())


def _random(name: str) -> Checkpoint:
    from moshi.models import loaders

    shape = name.removeprefix(RANDOM_PREFIX)
    if shape == "7b":
        return Checkpoint(name, None, None, None, dict(loaders._lm_kwargs), None)
    if shape == "tiny":
        lm = {**loaders._lm_kwargs, **_TINY_LM}
        mimi: dict[str, Any] = copy.deepcopy(loaders._mimi_config)
        mimi["seanet"].update(_TINY_MIMI_SEANET)
        mimi["quantizer"].update(_TINY_MIMI_QUANTIZER)
        mimi["transformer"].update(_TINY_MIMI_TRANSFORMER)
        return Checkpoint(name, None, None, None, lm, mimi)
    raise ValueError(f"unknown random shape {shape!r}: use random:7b or random:tiny")


def _folder(folder: Path) -> Checkpoint:
    if not folder.is_dir():
        raise MissingAssetError(
            f"duplex checkpoint folder {folder}",
            "set ANTIPHON_STAGE0_DUPLEX_CHECKPOINT / ANTIPHON_STAGE1_DUPLEX_CHECKPOINT to a "
            "local Moshi or PersonaPlex checkpoint (docs/duplex-models.md), or random:7b",
        )
    config_path = folder / "config.json"
    lm_config: dict[str, Any] | None = None
    mimi_config: dict[str, Any] | None = None
    names = {"moshi_name": LM_FILE, "mimi_name": MIMI_FILE, "tokenizer_name": TOKENIZER_FILE}
    gen: dict[str, Any] = {}
    if config_path.exists():
        raw = json.loads(config_path.read_text())
        lm_config = dict(raw)
        for key in names:
            names[key] = lm_config.pop(key, names[key])
        gen = lm_config.pop("lm_gen_config", {})
        mimi_config_name = lm_config.pop("mimi_config_name", None)
        # Keys moshi's loader reads for other model types, not LM arguments.
        for key in ("model_type", "lora_name", "tts_config", "stt_config", "model_id"):
            lm_config.pop(key, None)
        if mimi_config_name:
            mimi_config = json.loads(_file(folder, mimi_config_name).read_text())
        if not lm_config:
            # PersonaPlex ships `{}`: moshi's own 7B config, as with no file.
            lm_config = None
    return Checkpoint(
        str(folder),
        _file(folder, names["moshi_name"]),
        _file(folder, names["mimi_name"]),
        _file(folder, names["tokenizer_name"]),
        lm_config,
        mimi_config,
        gen,
    )


def _load_lm(
    weights: Path, lm_config: dict[str, Any] | None, device: str | torch.device, dtype: torch.dtype
) -> LMModel:
    """moshi's `get_moshi_lm` for a safetensors file, with the weights trimmed
    to the model's shape first (`trim_to`), then loaded strictly."""
    import torch
    from moshi.models import loaders
    from moshi.models.lm import LMModel
    from safetensors import safe_open

    kwargs = dict(copy.deepcopy(lm_config) if lm_config is not None else loaders._lm_kwargs)
    # What get_moshi_lm drops or renames before building (none of it is
    # used by Moshi or PersonaPlex; a config that needs more is refused).
    kwargs.pop("depformer_causal", None)
    if "demux_second_stream" in kwargs:
        kwargs["demux_second_text_stream"] = kwargs.pop("demux_second_stream")
    for unsupported in ("conditioners", "fuser", "lora"):
        if kwargs.get(unsupported):
            raise ValueError(f"LM config with {unsupported!r} is not supported here")
        kwargs.pop(unsupported, None)
    kwargs.pop("lora_rank", None)
    kwargs.pop("lora_scaling", None)
    model = LMModel(device=torch.device("meta"), dtype=dtype, **kwargs)
    wanted = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    state: dict[str, torch.Tensor] = {}
    with safe_open(str(weights), framework="pt", device=str(device)) as f:
        shapes = {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
        for key, rows in trim_to(shapes, wanted).items():
            value = f.get_tensor(key) if rows is None else f.get_slice(key)[:rows]
            if value.dtype.is_floating_point:
                value = value.to(dtype)
            state[key] = value
    model.load_state_dict(state, strict=True, assign=True)
    return model


# The depth transformer's per-step entries (ModuleList items, one per step).
_STEP = re.compile(
    r"^(?P<list>depformer_in|depformer_emb|linears"
    r"|depformer\.layers\.\d+\.(?:gating|self_attn\.in_projs|self_attn\.out_projs))"
    r"\.(?P<step>\d+)\."
)
# The depth transformer's per-step weights stored fused (moshi splits them
# into `in_projs.{i}` / `out_projs.{i}` at load): sliced to the model's steps.
_FUSED = {
    "self_attn.in_proj_weight": "self_attn.in_projs",
    "self_attn.out_proj.weight": "self_attn.out_projs",
}


def depformer_steps(keys: Iterable[str]) -> int:
    """Steps of the depth transformer a state dict's keys describe."""
    return sum(1 for key in keys if re.fullmatch(r"depformer_in\.\d+\.weight", key))


def trim_to(
    shapes: Mapping[str, tuple[int, ...]], wanted: Mapping[str, tuple[int, ...]]
) -> dict[str, int | None]:
    """The stored weights to load into a model whose state dict has `wanted`
    shapes, each with the rows to keep (None: all): per-step entries past the
    model's steps are left out (a 16-step depth transformer into moshi's 8),
    and fused per-step weights keep their first steps. Anything else is kept
    as it is, for the strict load to judge."""
    keep: dict[str, int | None] = {}
    for key, shape in shapes.items():
        if key in wanted:
            keep[key] = None
            continue
        fused = next((suffix for suffix in _FUSED if key.endswith(suffix)), None)
        if fused is not None:
            prefix = key.removesuffix(fused)
            steps = [k for k in wanted if k.startswith(prefix + _FUSED[fused] + ".")]
            rows = sum(wanted[k][0] for k in steps)
            keep[key] = rows if steps and rows < shape[0] else None
            continue
        if _surplus_step(key, wanted):
            continue
        keep[key] = None
    return keep


def _surplus_step(key: str, wanted: Mapping[str, tuple[int, ...]]) -> bool:
    """`key` is a per-step entry of the depth transformer past the last step
    the model has (the same entry at step 0 is one of the model's). Nothing
    else is ever left out: a wrong layer count must fail the strict load."""
    match = _STEP.match(key)
    if match is None:
        return False
    rest = key[match.end() :]
    return f"{match['list']}.0.{rest}" in wanted


def _safetensors_keys(path: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def _fill_codebooks(mimi: MimiModel) -> None:
    """moshi initialises Mimi's codebooks to zeros, so a random Mimi encodes
    every input to the same codes and a row could hear another's audio
    unnoticed. Small random entries (the scale of a random encoder's latents)
    make different inputs give different codes."""
    from moshi.quantization.core_vq import EuclideanCodebook

    for module in mimi.modules():
        if isinstance(module, EuclideanCodebook):
            module.embedding_sum.normal_(std=0.001)
            # Drop the cached embedding so the next use derives it anew.
            module.register_buffer("_embedding", None, persistent=False)


def _file(folder: Path, name: str) -> Path:
    path = folder / name
    if not path.exists():
        raise MissingAssetError(f"{name} in duplex checkpoint {folder}")
    return path


def device(name: str) -> torch.device:
    """A duplex worker's `duplex_device`: "auto" is a GPU where there is one."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def compile_mode(compile: bool) -> contextlib.AbstractContextManager[None]:
    """Around moshi's calls: its torch.compile only when asked for (this also
    covers a moshi imported before NO_TORCH_COMPILE could be set)."""
    if compile:
        return contextlib.nullcontext()
    from moshi.utils.compile import no_compile

    mode: contextlib.AbstractContextManager[None] = no_compile()
    return mode


def disable_compile_by_default() -> None:
    """moshi compiles some functions with torch.compile at first call (some
    30 s on this CPU); unless the operator asked otherwise, run them eager.
    Read by moshi when its modules are imported: call before importing it."""
    os.environ.setdefault("NO_TORCH_COMPILE", "1")
