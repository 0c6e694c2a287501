"""Whisper ASR on faster-whisper (CTranslate2), for whole utterances.

`transcribe` blocks for roughly a quarter of the audio's length on one core;
callers run it in a thread executor so the event loop keeps serving sessions.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from faster_whisper import WhisperModel

SAMPLE_RATE = 16_000


class WhisperAsr:
    """One CTranslate2 Whisper model; English, greedy, no internal VAD, no timestamps."""

    def __init__(self, model_dir: Path, threads: int = 1, compute_type: str = "int8") -> None:
        self._model = WhisperModel(
            str(model_dir),
            device="cpu",
            compute_type=compute_type,
            # The worker shares a small CPU with VAD and the LLM.
            cpu_threads=threads,
            # One utterance at a time per model: concurrency comes from more workers.
            num_workers=1,
            # A directory path never touches the hub; this makes sure of it.
            local_files_only=True,
        )

    def transcribe(self, pcm16_16k: bytes) -> str:
        """PCM16 mono 16 kHz in, stripped text out ("" for no audio or no speech)."""
        usable = len(pcm16_16k) // 2 * 2
        if not usable:
            return ""
        audio = np.frombuffer(pcm16_16k[:usable], dtype="<i2").astype(np.float32) / 32768.0
        segments, _info = self._model.transcribe(
            audio,
            language="en",
            task="transcribe",
            beam_size=1,
            best_of=1,
            # One pass only: the temperature fallback could multiply a turn's latency.
            temperature=0.0,
            # Stage0's Silero VAD already cut the utterance.
            vad_filter=False,
            without_timestamps=True,
            # Each utterance stands alone; earlier text would only invite repetition.
            condition_on_previous_text=False,
        )
        # `segments` is lazy: decoding happens while iterating.
        return "".join(segment.text for segment in segments).strip()
