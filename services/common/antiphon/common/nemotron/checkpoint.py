"""Which Nemotron VoiceChat a duplex worker serves, and how NeMo builds it.

One setting (`duplex_checkpoint`, as for the Moshi architecture) names it,
read the same way by stage0 (the listening half, NeMo's `DuplexSTTModel`:
perception and the LLM) and stage1 (the speaking half, `DuplexEARTTS`: the
TTS and its codec):

- a local folder in the layout of the published checkpoints: `config.json`
  (NemotronVoiceChat's config) and `model.safetensors` (its weights, keys
  under `stt_model.` and `tts_model.`), plus the LLM's Hugging Face config and
  tokenizer in a subfolder that the config's `pretrained_llm` names
  relative to the folder (its name must contain "Nemotron": NeMo picks its
  NemotronH code paths by that substring). Nothing is downloaded.
- `random:tiny`: the tiny random configuration of tiny.py, for tests;
  `random:9b`: the published shape (nine_b.py), for benchmarks.

Random weights are drawn from fixed seeds, so that every process on one
kind of device builds the same model, and on the device the model runs on:
torch's CPU generator draws one number at a time, a minute for 9B
parameters. Only stage workers import this module; torch and NeMo load
inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from antiphon.common.assets import RANDOM_PREFIX, MissingAssetError, random_shape

if TYPE_CHECKING:
    import torch
    from nemo.collections.speechlm2.models.duplex_ear_tts import DuplexEARTTS
    from nemo.collections.speechlm2.models.duplex_stt_model import DuplexSTTModel

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
# The halves' keys in the published weights (NemotronVoiceChat's attributes).
STT_PREFIX = "stt_model."
TTS_PREFIX = "tts_model."
_STT_SEED = 4801
_TTS_SEED = 4802

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Checkpoint:
    name: str
    folder: Path
    config: dict[str, Any]
    weights: Path | None  # None: random

    @property
    def input_rate(self) -> int:
        return int(self.config["data"]["source_sample_rate"])

    @property
    def output_rate(self) -> int:
        """The codec's rate (22,050 Hz): stage1 resamples it once to the session's."""
        return int(self.config["data"]["target_sample_rate"])

    @property
    def frame_ms(self) -> int:
        return round(float(self.config["data"]["frame_length"]) * 1000)

    def stt(self, device: str | torch.device = "cpu") -> DuplexSTTModel:
        """NeMo's DuplexSTTModel: perception, the LLM, its text head."""
        import torch
        from nemo.collections.speechlm2.models.duplex_stt_model import DuplexSTTModel

        cfg = self._part(self.config["model"]["stt"]["model"], "pretrained_llm")
        cfg.setdefault("validation_save_path", self._scratch())

        def build() -> DuplexSTTModel:
            torch.manual_seed(_STT_SEED)
            model = DuplexSTTModel(cfg)
            if cfg.get("use_function_head"):
                # The published checkpoints carry a function head beside the
                # text head (`stt_model.function_head.weight`, one tool-call
                # token a frame); NeMo 3.0.0's DuplexSTTModel builds none, so
                # it is made here, its shape the text head's, for the
                # weights to load into.
                head = model.lm_head
                model.function_head = torch.nn.Linear(
                    head.in_features, head.out_features, bias=False
                )
            return model

        model = self._build(build, device)
        if self.weights is not None:
            _load(model, self.weights, STT_PREFIX)
        return model.eval().to(device)

    def tts(self, device: str | torch.device = "cpu") -> DuplexEARTTS:
        """NeMo's DuplexEARTTS: the TTS backbone and the RVQ codec."""
        import torch
        from nemo.collections.speechlm2.models.duplex_ear_tts import DuplexEARTTS

        cfg = dict(self.config["model"]["speech_generation"])
        cfg["model"] = self._part(cfg["model"], "pretrained_lm_name")
        cfg.setdefault("exp_manager", {"explicit_log_dir": self._scratch()})

        def build() -> DuplexEARTTS:
            torch.manual_seed(_TTS_SEED)
            model = DuplexEARTTS(cfg)
            # As NemotronVoiceChat does after building it (inference's silence).
            model.codec_silence_tokens = model.get_codec_silence_frame()
            return model

        model = self._build(build, device)
        if self.weights is not None:
            _load(model, self.weights, TTS_PREFIX)
        return model.eval().to(device)

    def _build(self, build: Callable[[], Any], device: str | torch.device) -> Any:
        """`build()` with the global RNG left as it was: random weights drawn
        on `device`, published ones made on the CPU (the file is read there).
        Should a constructor of NeMo's fail on `device`, the model is built
        on the CPU instead, slower, and the log says so."""
        import torch

        where = torch.device("cpu" if self.weights is not None else device)
        try:
            with _forked_rng(where), where:
                return build()
        except Exception as exc:  # hydra wraps a constructor's error in its own
            if where.type == "cpu":
                raise
            log.warning("%s: built on the CPU, not %s: %s", self.name, where, exc)
        # Outside the handler: its traceback no longer holds the failed build's tensors.
        with _forked_rng(torch.device("cpu")):
            return build()

    def _part(self, cfg: dict[str, Any], llm_key: str) -> dict[str, Any]:
        """`cfg` with its LLM and tokenizer paths made absolute, weights from
        this checkpoint (never a hub)."""
        cfg = dict(cfg)
        for key in (llm_key, "tokenizer_path"):
            if cfg.get(key):
                path = self.folder / cfg[key]
                if not path.is_dir():
                    raise MissingAssetError(
                        f"{self.name}: {key} {cfg[key]!r} is not a folder in the checkpoint"
                    )
                cfg[key] = str(path)
        cfg["pretrained_weights"] = False
        return cfg

    def _scratch(self) -> str:
        # NeMo's constructors want a log folder; inference writes nothing there.
        return tempfile.mkdtemp(prefix="nemotron-logs-")


@contextlib.contextmanager
def _forked_rng(device: torch.device) -> Iterator[None]:
    """torch.manual_seed reseeds every device: their generators are put back."""
    import torch

    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        yield


def resolve(name: str) -> Checkpoint:
    """The checkpoint `name` names; MissingAssetError for a folder that lacks a
    file, ValueError for an unknown random shape."""
    if name.startswith(RANDOM_PREFIX):
        shape = _random_shape(name)
        folder = Path(tempfile.mkdtemp(prefix="nemotron-random-"))
        shape.write(folder)
        return Checkpoint(name, folder, shape.config(), None)
    folder = Path(name).expanduser()
    for needed in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / needed).is_file():
            raise MissingAssetError(f"Nemotron VoiceChat checkpoint {folder} has no {needed}")
    config = json.loads((folder / CONFIG_FILE).read_text())
    return Checkpoint(name, folder, config, folder / WEIGHTS_FILE)


def has_function_head(name: str) -> bool:
    """Whether the checkpoint `name` calls tools (a function head), read from
    its config alone; False for one that cannot be read (it fails to load)."""
    if name.startswith(RANDOM_PREFIX):
        config = _random_shape(name).config()
    else:
        try:
            config = json.loads((Path(name).expanduser() / CONFIG_FILE).read_text())
        except (OSError, ValueError):
            return False
    stt = config.get("model", {}).get("stt", {}).get("model", {})
    return bool(stt.get("use_function_head"))


def _random_shape(name: str) -> Any:
    """The module that writes the random shape `name` names (tiny.py, nine_b.py)."""
    from antiphon.common.nemotron import nine_b, tiny

    return random_shape(name, {"tiny": tiny, "9b": nine_b}, "Nemotron VoiceChat")


def _load(model: torch.nn.Module, weights: Path, prefix: str) -> None:
    """The half's tensors from the whole model's file, every one of the right
    shape and none of the model's left out (NeMo's own loader only warns)."""
    from safetensors import safe_open

    params = dict(model.named_parameters()) | dict(model.named_buffers())
    loaded: set[str] = set()
    with safe_open(str(weights), framework="pt", device="cpu") as f:
        for key in f.keys():
            if not key.startswith(prefix):
                continue
            name = key.removeprefix(prefix)
            tensor = f.get_tensor(key)
            if "audio_prompt_latents." in name:
                # The TTS's speaker prompt is shaped by the checkpoint (NeMo's rule).
                model.maybe_recreate_cached_audio_prompt_latents_structure({name: tensor})  # type: ignore[operator]
                params = dict(model.named_parameters()) | dict(model.named_buffers())
            target = params.get(name)
            if target is None:
                raise MissingAssetError(f"{weights}: {key} is not in the model the config builds")
            if target.shape != tensor.shape:
                raise MissingAssetError(
                    f"{weights}: {key} is {tuple(tensor.shape)}, "
                    f"the model's is {tuple(target.shape)}"
                )
            target.data.copy_(tensor)
            loaded.add(name)
    missing = sorted(set(dict(model.named_parameters())) - loaded)
    if missing:
        raise MissingAssetError(
            f"{weights}: no tensor for {len(missing)} parameters, e.g. {missing[:3]}"
        )
