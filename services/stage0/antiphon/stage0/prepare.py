"""`make models`: install-time preparation of every model asset into the cache.

Runs once per machine (idempotent); the workers themselves only locate
what is prepared and fail with a clear error when something is missing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from antiphon.common.assets import MissingAssetError, default_cache_dir
from antiphon.stage0 import assets as stage0_assets


def main() -> None:
    cache = Path(sys.argv[1]) if len(sys.argv) > 1 else default_cache_dir()
    t0 = time.perf_counter()
    prepared = stage0_assets.prepare(cache)
    print(f"stage0 assets ready in {time.perf_counter() - t0:.1f}s: {prepared}")
    try:
        from antiphon.stage1 import assets as stage1_assets
    except ImportError:
        return  # a stage0-only image
    try:
        located = stage1_assets.locate()
    except MissingAssetError:
        return  # a stage0-only image has no voice package
    print(f"stage1 assets ready: {located}")


if __name__ == "__main__":
    main()
