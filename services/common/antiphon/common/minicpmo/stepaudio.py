"""MiniCPM-o 4.5's token2wav modules, taken from stepaudio2-minicpmo without
running its package `__init__`, and the files of a token2wav folder.

MiniCPM-o's published code turns the talker's speech codes into audio with
`stepaudio2.Token2wav` (PyPI `stepaudio2-minicpmo` 0.1.1): CosyVoice2's
flow (`CausalMaskedDiffWithXvec`: an upsampling conformer, then a DiT solved
by `CausalConditionalCFM`) and the HiFT vocoder. Those modules are pure
torch, but `import stepaudio2` runs an `__init__` that imports the
CUDA-only `Token2wav` (torchaudio, built for another torch here, and
s3tokenizer) and a transformers LLM. So `module()` registers the package
as an empty shell, made from its import spec and never executed, and then
imports only the submodules asked for, whose own imports are torch, numpy,
einops, scipy and onnxruntime. The package goes in with --no-deps (the
Makefile); a process that later runs `import stepaudio2` gets the shell.

A token2wav folder (`<checkpoint>/assets/token2wav`) holds `flow.yaml`,
`flow.pt` and `hift.pt` as published, and `speaker.pt` (`Speaker`), ours.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from antiphon.common.assets import MissingAssetError

if TYPE_CHECKING:
    from types import ModuleType

    import torch

PACKAGE = "stepaudio2"
FLOW_CONFIG = "flow.yaml"
FLOW_WEIGHTS = "flow.pt"
HIFT_WEIGHTS = "hift.pt"
SPEAKER = "speaker.pt"
# flow.yaml builds its modules with these hyperpyyaml tags and no others
# (the published file names them under the top-level `cosyvoice2` package,
# which the package's Token2wav aliases to its own). Reading only them with
# PyYAML's safe loader spares hyperpyyaml, and a folder's YAML cannot run
# other code.
_FLOW_TAGS = {
    "!new:cosyvoice2.flow.flow.CausalMaskedDiffWithXvec": (
        "cosyvoice2.flow.flow",
        "CausalMaskedDiffWithXvec",
    ),
    "!new:cosyvoice2.transformer.upsample_encoder_v2.UpsampleConformerEncoderV2": (
        "cosyvoice2.transformer.upsample_encoder_v2",
        "UpsampleConformerEncoderV2",
    ),
    "!new:cosyvoice2.flow.flow_matching.CausalConditionalCFM": (
        "cosyvoice2.flow.flow_matching",
        "CausalConditionalCFM",
    ),
    "!new:cosyvoice2.flow.decoder_dit.DiT": ("cosyvoice2.flow.decoder_dit", "DiT"),
}
_CFM = "CausalConditionalCFM"
# The solver's noise: the package draws 10 minutes of it from the global
# generator as the flow is built; drawn from a fixed seed here, every
# worker speaks a code alike.
_NOISE_FRAMES = 50 * 600
_NOISE_SEED = 0
# The DiT and the solver run each step on the conditioned and the
# unconditioned input at once (classifier-free guidance).
_GUIDED_BATCH = 2


def module(name: str) -> ModuleType:
    """The stepaudio2 submodule `name` ("cosyvoice2.flow.flow"), imported
    without the package's `__init__`."""
    if PACKAGE not in sys.modules:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.submodule_search_locations is None:
            raise MissingAssetError(
                "the stepaudio2-minicpmo package", "MiniCPM-o's token2wav modules"
            )
        sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)
    return importlib.import_module(f"{PACKAGE}.{name}")


def build_flow(config: str, *, steps: int, frames: int) -> torch.nn.Module:
    """The flow (`CausalMaskedDiffWithXvec`) flow.yaml's text `config`
    describes, with random weights, its solver's scratch sized for `steps`
    solver steps over `frames` mel frames of attention cache."""
    import torch

    class FlowLoader(yaml.SafeLoader):
        pass

    def construct(loader: FlowLoader, node: yaml.MappingNode) -> torch.nn.Module:
        where, name = _FLOW_TAGS[str(node.tag)]
        kwargs = {str(k): v for k, v in loader.construct_mapping(node, deep=True).items()}
        cls = getattr(module(where), name)
        if name != _CFM:
            built: torch.nn.Module = cls(**kwargs)
            return built
        # Its scratch, sized for the published shape, is 2 GB of zeros:
        # made on no memory, then at this flow's size by _fit_scratch.
        with torch.device("meta"):
            cfm: torch.nn.Module = cls(**kwargs)
        return cfm

    for tag in _FLOW_TAGS:
        FlowLoader.add_constructor(tag, construct)
    built = yaml.load(config, Loader=FlowLoader)  # a SafeLoader, with the tags above
    flow_cls = module("cosyvoice2.flow.flow").CausalMaskedDiffWithXvec
    flow = built.get("flow") if isinstance(built, dict) else None
    if not isinstance(flow, flow_cls):
        raise ValueError(f"{FLOW_CONFIG} builds no `flow: !new:...CausalMaskedDiffWithXvec`")
    _fit_scratch(flow, steps=steps, frames=frames)
    checked: torch.nn.Module = flow
    return checked


def _fit_scratch(flow: Any, *, steps: int, frames: int) -> None:
    """Remakes the solver's scratch buffers, which the package sizes for the
    published DiT alone (16 blocks, 8 heads of 64, 1000 frames): its
    `inference_chunk` writes each step's caches into them and returns views
    of them."""
    import torch

    cfm = flow.decoder
    dit = cfm.estimator
    depth = len(dit.blocks)
    attention = dit.blocks[0].attn
    conv = dit.blocks[0].conv
    kv = (_GUIDED_BATCH, attention.num_heads, frames, 2 * attention.head_dim)
    conv_state = (
        _GUIDED_BATCH,
        conv.in_channels + conv.out_channels,
        conv.block[1].causal_padding[0],
    )
    dit.att_cache_buffer = torch.zeros(depth, *kv)
    dit.cnn_cache_buffer = torch.zeros(depth, *conv_state)
    cfm.att_cache_buffer = torch.zeros(steps, depth, *kv)
    cfm.cnn_cache_buffer = torch.zeros(steps, depth, *conv_state)
    seeded = torch.Generator().manual_seed(_NOISE_SEED)
    cfm.rand_noise = torch.randn(1, cfm.out_channels, _NOISE_FRAMES, generator=seeded)


def build_hift(state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """The HiFT vocoder that hift.pt's `state` fits, loaded. The package
    builds `HiFTGenerator()`; its widths are read from the state here (the
    published file gives the defaults), the rest is the published shape."""
    # Training checkpoints prefix the generator's weights (as the package strips).
    state = {k.removeprefix("generator."): v for k, v in state.items()}
    # Biases, unlike the weights, are stored alike with and without weight norm.
    try:
        base = int(state["conv_pre.bias"].shape[0])
        f0 = int(state["f0_predictor.condnet.0.bias"].shape[0])
    except KeyError as missing:
        raise ValueError(f"{HIFT_WEIGHTS} is no HiFT vocoder: it lacks {missing}") from None
    hift = new_hift(base_channels=base, f0_channels=f0)
    hift.load_state_dict(state, strict=True)
    return hift


def new_hift(*, base_channels: int, f0_channels: int) -> torch.nn.Module:
    """A HiFT vocoder of the published shape but for these two widths
    (published: 512 and 512), with random weights."""
    hifigan = module("flashcosyvoice.modules.hifigan")
    hift: torch.nn.Module = hifigan.HiFTGenerator(
        base_channels=base_channels,
        f0_predictor=hifigan.ConvRNNF0Predictor(cond_channels=f0_channels),
    )
    return hift


@dataclass(frozen=True)
class Speaker:
    """One voice's conditioning, precomputed from a prompt recording: what
    the package's `Token2wav._prepare_prompt` derives from a wav on every
    start. Written as `speaker.pt`, a dict of these three tensors.

    - `tokens` `[T]` int64: the prompt's S3 codes, 25 a second (the S3
      tokenizer ONNX, `speech_tokenizer_v2_25hz.onnx`, on the 16 kHz wav);
    - `mel` `[2T, 80]` float32: its log mel at 50 frames a second (the
      24 kHz wav, n_fft 1920, hop 480, fmax 8000: the package's
      `mel_spectrogram`), cut or padded with its last frame to 2T frames;
    - `embedding` `[192]` float32: campplus's speaker embedding
      (`campplus.onnx`) of the 16 kHz wav's 80-bin Kaldi fbank, less its
      mean over time.

    Computing them needs that ONNX pair, a Kaldi fbank and resampling, which
    the package takes from torchaudio (built for another torch here)."""

    tokens: torch.Tensor
    mel: torch.Tensor
    embedding: torch.Tensor

    def __post_init__(self) -> None:
        t = self.tokens.shape[0] if self.tokens.dim() == 1 else -1
        if t < 1 or tuple(self.mel.shape[:1]) != (2 * t,) or self.embedding.dim() != 1:
            raise ValueError(
                f"{SPEAKER} needs tokens [T], mel [2T, bins], embedding [dim]; got "
                f"{tuple(self.tokens.shape)}, {tuple(self.mel.shape)}, "
                f"{tuple(self.embedding.shape)}"
            )

    @classmethod
    def read(cls, path: Path) -> Speaker:
        import torch

        if not path.is_file():
            raise MissingAssetError(f"MiniCPM-o's token2wav speaker ({path})")
        saved = torch.load(path, map_location="cpu", weights_only=True)
        return cls(
            tokens=saved["tokens"].long(),
            mel=saved["mel"].float(),
            embedding=saved["embedding"].float(),
        )

    def write(self, path: Path) -> None:
        import torch

        torch.save({"tokens": self.tokens, "mel": self.mel, "embedding": self.embedding}, path)
