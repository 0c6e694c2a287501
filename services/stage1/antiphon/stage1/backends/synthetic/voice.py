"""The `synthetic` stage1 backend: a quiet tone whose length follows the text.

For load and fault tests of the serving path only; never the default. It
keeps Piper's contract (chunk texts join to the input, word marks end at the
chunk's duration) at a fixed, configurable cost per character.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import numpy as np

from antiphon.common.audio import float32_to_pcm16
from antiphon.common.audio_formats import PCM_OUTPUT_RATE
from antiphon.stage1.speech.voice import SpeechChunk

_WORD_END = re.compile(r"\S+")


class SyntheticTts:
    def __init__(
        self,
        *,
        out_rate: int = PCM_OUTPUT_RATE,
        ms_per_char: float = 60.0,
        compute_ratio: float = 0.0,
    ) -> None:
        self.out_rate = out_rate
        self._ms_per_char = ms_per_char
        # Seconds of (blocking) work per second of audio, to model a real voice's cost.
        self._compute_ratio = compute_ratio

    def synthesize(self, text: str, speed: float = 1.0) -> Iterator[SpeechChunk]:
        if not text:
            return
        total_ms = max(1, round(len(text) * self._ms_per_char / speed))
        if self._compute_ratio:
            time.sleep(total_ms / 1000 * self._compute_ratio)
        n = self.out_rate * total_ms // 1000
        t = np.arange(n, dtype=np.float32) / self.out_rate
        pcm = float32_to_pcm16(0.05 * np.sin(2 * np.pi * 220.0 * t))
        marks = [(m.end(), round(m.end() * total_ms / len(text))) for m in _WORD_END.finditer(text)]
        if not marks or marks[-1] != (len(text), total_ms):
            marks.append((len(text), total_ms))
        yield SpeechChunk(pcm16=pcm, text=text, duration_ms=total_ms, marks=marks)
