"""MiniCPM-o 4.5's Hugging Face configuration, as the fields vLLM reads.

The published `config.json` (`model_type: "minicpmo"`, `version: "4.5"`)
names a configuration class that is remote code on the hub; this one stands
in for it. It is the Qwen3 LLM's configuration (vLLM builds the LLM from the
top-level fields) plus what vLLM's `minicpmo.py`, `minicpmv.py` and the
MiniCPM-o processor read:

- `version`: picks `MiniCPMO4_5` (Qwen3, SigLIP + `Resampler4_5`, Whisper).
- `query_num`: the resampler's queries, so the tokens one image slice costs.
- `image_size`: the side of the largest slice vLLM profiles with.
- `drop_vision_last_layer`: whether SigLIP's last layer is cut off.
- `audio_pool_step`: Whisper frames averaged into one audio token (5: 100 ms).
- `audio_chunk_length`: seconds the audio encoder attends within (1 s units).
- `vision_config` (SigLIP) and `audio_config` (Whisper's encoder).

Loaded from a published `config.json`, the fields this class does not name
(`slice_config`, `tts_config`, `stream_input`, ...) stay attributes as read.
"""

from __future__ import annotations

from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import PretrainedConfig, Qwen3Config, SiglipVisionConfig, WhisperConfig

MODEL_TYPE = "minicpmo"
VERSION = "4.5"


@strict
class MiniCPMOConfig(Qwen3Config):  # type: ignore[no-untyped-call]  # transformers' hook is untyped
    model_type = MODEL_TYPE
    sub_configs = {"vision_config": SiglipVisionConfig, "audio_config": WhisperConfig}

    version: str | float = VERSION
    query_num: int = 64
    image_size: int = 448
    drop_vision_last_layer: bool = False
    use_image_id: bool = True
    # How the processor cuts a large image (max_slice_nums, scale_resolution, patch_size).
    slice_config: dict[str, Any] | None = None
    slice_mode: bool = True
    audio_pool_step: int = 5
    audio_chunk_length: float | int = 1.0
    vision_config: dict[str, Any] | PretrainedConfig | None = None
    audio_config: dict[str, Any] | PretrainedConfig | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        # Dicts as read from config.json become the sub-configurations vLLM's
        # encoders are built from; None takes the library's defaults.
        if not isinstance(self.vision_config, PretrainedConfig):
            self.vision_config = SiglipVisionConfig(**(self.vision_config or {}))
        if not isinstance(self.audio_config, PretrainedConfig):
            self.audio_config = WhisperConfig(**(self.audio_config or {}))
        super().__post_init__(**kwargs)  # type: ignore[no-untyped-call]

    @property
    def vision(self) -> SiglipVisionConfig:
        """`vision_config`, typed (a dict only before __post_init__)."""
        assert isinstance(self.vision_config, SiglipVisionConfig)
        return self.vision_config

    @property
    def audio(self) -> WhisperConfig:
        """`audio_config`, typed."""
        assert isinstance(self.audio_config, WhisperConfig)
        return self.audio_config


def register() -> None:
    """Make `AutoConfig` read a `model_type: "minicpmo"` folder with this class.

    Called by whoever loads a MiniCPM-o checkpoint (checkpoint.resolve), not
    at import: registering changes what transformers answers, for the whole
    process, about a model type it does not know; importing this module (a
    type checker, a test that only reads the constants) should not. Calling
    it again is harmless.
    """
    from transformers import AutoConfig

    AutoConfig.register(MODEL_TYPE, MiniCPMOConfig, exist_ok=True)
