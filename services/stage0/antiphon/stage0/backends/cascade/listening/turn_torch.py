"""Smart Turn on the GPU: every waiting session's window in one batch, its
features computed there too.

On a CPU, `SmartTurn` (turn.py) computes each window's log-mel features in
numpy and runs onnxruntime's int8 kernels on one thread; at 128 semantic_vad
sessions on an H200 that thread was the lane's limit (docs/performance.md,
"The whole stack on one H200": 68 % of it in the model, 29 % in the features). Here the same
ONNX file runs as torch operators (common/onnx/torch_graph.py), its quantize and
dequantize steps included. A requantized value rounds the other way here
and there, which moves an answer less than onnxruntime's own two ways of
running the graph differ (docs/performance.md, "Smart Turn on one GPU";
tests/stage0/test_turn.py bounds it). The features are pipecat's, batched
on the device with torch's STFT.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from antiphon.common.onnx.torch_graph import TorchGraph
from antiphon.stage0.backends.cascade.asr.whisper_torch import log_mel, mel_filters
from antiphon.stage0.backends.cascade.listening.turn import (
    WINDOW_SAMPLES,
    Float32Array,
    last_samples,
)

N_MELS = 80
# transformers' WhisperFeatureExtractor (which pipecat's extractor follows)
# adds this to the variance before it scales the waveform.
_VARIANCE_EPS = 1e-7


def features(audio: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """8 s windows [B, 128000] -> normalised log-mel features [B, 80, 800],
    as pipecat's `compute_whisper_log_mel_features` gives them one by one:
    each window scaled to zero mean and unit variance, its spectrum's last
    frame dropped."""
    mean = audio.mean(dim=1, keepdim=True)
    variance = audio.var(dim=1, unbiased=False, keepdim=True)
    scaled = (audio - mean) / torch.sqrt(variance + _VARIANCE_EPS)
    return log_mel(scaled, filters, tail=0)


class TorchSmartTurn:
    """Smart Turn v3.2 on `device`: `predict` as `SmartTurn.predict`, one batch a call."""

    def __init__(self, onnx_path: Path, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self._graph = TorchGraph(str(onnx_path), device)
        (self._input,) = self._graph.input_names
        self._filters = torch.from_numpy(mel_filters(N_MELS)).to(self.device)

    @torch.inference_mode()
    def predict(self, clips: Sequence[bytes]) -> Float32Array:
        """Probability that each clip's turn is complete (`TurnModel.predict`)."""
        if not clips:
            return np.zeros(0, dtype=np.float32)
        # Samples go to the device as they came, half a float's bytes, and
        # become the model's windows there.
        batch = np.zeros((len(clips), WINDOW_SAMPLES), dtype=np.int16)
        for row, clip in enumerate(clips):
            samples = last_samples(clip)
            if len(samples):
                batch[row, -len(samples) :] = samples
        audio = torch.from_numpy(batch).to(self.device).float() / 32768.0
        (probs,) = self._graph.run({self._input: features(audio, self._filters)})
        # The export ends in a sigmoid: these are probabilities, not logits.
        return probs.float().cpu().numpy().reshape(-1)
