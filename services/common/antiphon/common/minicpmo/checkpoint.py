"""Which MiniCPM-o 4.5 a worker serves, as a folder vLLM can load.

One setting names it:

- a local folder in the published layout: `config.json` (`model_type:
  "minicpmo"`, `version: "4.5"`), the weights (`*.safetensors`), the
  tokenizer and `preprocessor_config.json`. Nothing is downloaded.
- `random:tiny`: tiny.py's thinker, random weights written to a temporary
  folder, for tests;
- `random:4.5`: the published shapes (four_five.py), no weights file: vLLM
  draws them (`load_format="dummy"`), for benchmarks.

vLLM loads the folder with `trust_remote_code=True`: the tokenizer and image
processor are code files of the folder (for a random one, imports of this
package). Only model workers import this module; transformers loads inside
the functions that need it.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from antiphon.common.assets import RANDOM_PREFIX, MissingAssetError, random_shape

CONFIG_FILE = "config.json"
_NEEDED = (CONFIG_FILE, "tokenizer_config.json", "preprocessor_config.json")


@dataclass(frozen=True)
class Checkpoint:
    name: str
    folder: Path
    config: dict[str, Any]
    has_weights: bool

    @property
    def load_format(self) -> str:
        """vLLM's `load_format`: the folder's safetensors, or random ones."""
        return "safetensors" if self.has_weights else "dummy"

    @property
    def query_num(self) -> int:
        """Tokens one image slice costs the prompt (the resampler's queries)."""
        return int(self.config["query_num"])

    @property
    def audio_tokens_per_second(self) -> int:
        """Tokens one second of audio costs: 100 mel frames, halved by
        Whisper's strided convolution, averaged `audio_pool_step` at a time."""
        step = int(self.config.get("audio_pool_step", 5))
        return (50 - step) // step + 1


def resolve(name: str) -> Checkpoint:
    """The checkpoint `name` names, MiniCPM-o's configuration registered with
    transformers; MissingAssetError for a folder that lacks a file,
    ValueError for an unknown random shape."""
    from antiphon.common.minicpmo.config import register

    register()
    if name.startswith(RANDOM_PREFIX):
        shape = _random_shape(name)
        folder = Path(tempfile.mkdtemp(prefix="minicpmo-random-"))
        shape.write(folder)
    else:
        folder = Path(name).expanduser()
        for needed in _NEEDED:
            if not (folder / needed).is_file():
                raise MissingAssetError(f"MiniCPM-o checkpoint {folder} has no {needed}")
    config = json.loads((folder / CONFIG_FILE).read_text())
    return Checkpoint(name, folder, config, any(folder.glob("*.safetensors")))


def _random_shape(name: str) -> Any:
    """The module that writes the random shape `name` names (tiny.py, four_five.py)."""
    from antiphon.common.minicpmo import four_five, tiny

    return random_shape(name, {"tiny": tiny, "4.5": four_five}, "MiniCPM-o")
