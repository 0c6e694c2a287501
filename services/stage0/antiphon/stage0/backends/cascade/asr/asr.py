"""Whisper ASR on CTranslate2 (faster-whisper's model), sized to the audio.

Whisper was trained on 30 s windows, and faster-whisper always pads to one,
so every utterance cost a full 30 s encoder pass (about 1.6 s here) however
short it was. CTranslate2's encoder accepts shorter inputs, so we encode
the audio plus a few seconds of silence instead: cost then grows with the
audio's length (about 300 ms for 2 s of speech at one thread) and the text
is the same on our fixtures. `StreamingTranscript` builds on that: it transcribes
an utterance piece by piece while the user is still speaking, so the end of
a turn only pays for its tail.

`transcribe` blocks; callers run it in a thread executor so the event loop
keeps serving sessions.
"""

from __future__ import annotations

from pathlib import Path

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel

from antiphon.stage0.backends.cascade.asr.asr_text import (
    MAX_FRAMES,
    PAD_S,
    SAMPLE_RATE,
    heard,
    token_budget,
)


class WhisperAsr:
    """One CTranslate2 Whisper model; English, greedy, no timestamps."""

    def __init__(
        self, model_dir: Path, threads: int = 1, compute_type: str = "int8", workers: int = 1
    ) -> None:
        whisper = WhisperModel(
            str(model_dir),
            device="cpu",
            compute_type=compute_type,
            # The worker shares a small CPU with VAD and the LLM.
            cpu_threads=threads,
            # Utterances transcribed at once, each from its own calling thread
            # (the worker's ASR executor is as wide): 1 on a small shared box.
            num_workers=max(1, workers),
            # A directory path never touches the hub; this makes sure of it.
            local_files_only=True,
        )
        self._model: ctranslate2.models.Whisper = whisper.model
        self._features = whisper.feature_extractor
        tokenizer = whisper.hf_tokenizer
        self._decode = tokenizer.decode
        self._prompt = [
            tokenizer.token_to_id(t)
            for t in ("<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>")
        ]

    def transcribe(self, pcm16_16k: bytes) -> str:
        """PCM16 mono 16 kHz in, stripped text out ("" for no audio or no speech)."""
        usable = len(pcm16_16k) // 2 * 2
        if not usable:
            return ""
        audio = np.frombuffer(pcm16_16k[:usable], dtype="<i2").astype(np.float32) / 32768.0
        padded = np.concatenate((audio, np.zeros(int(PAD_S * SAMPLE_RATE), np.float32)))
        features = self._features(padded)[:, :MAX_FRAMES]
        seconds = min(len(audio) / SAMPLE_RATE, 30.0)
        result = self._model.generate(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(features[np.newaxis])),
            [self._prompt],
            beam_size=1,
            max_length=token_budget(seconds),
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
        )[0]
        if not result.sequences_ids or not result.sequences_ids[0]:
            return ""
        avg_logprob = result.scores[0] if result.scores else 0.0
        return heard(str(self._decode(result.sequences_ids[0])), avg_logprob, result.no_speech_prob)
