"""Spoken test fixtures, made at test time by two unrelated voices.

Piper is also the stack's own TTS, so a suite that only hears Piper can pass
while real voices fail; espeak-ng (formant synthesis, other prosody) is the
second voice every lane is tested with. Piper is a model engine: a test
that hears it is marked `models` (`tests/support/tiers.py`); espeak-ng is not.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from antiphon.common.audio import resample_pcm16
from bench.lib import speech
from bench.lib.speech import VOICES, Voice, espeak_paused, piper_split, silence
from tests.support import tiers

__all__ = ["VOICES", "Voice", "silence", "spoken", "spoken_cut", "spoken_paused"]


def _needs(voice: Voice) -> None:
    """Checked before the caches: a test that reuses speech made for another uses Piper too."""
    if voice == "piper":
        tiers.require_marker(tiers.MODELS, "synthesizes speech with Piper")


def spoken(text: str, rate: int = 24000, voice: Voice = "piper") -> bytes:
    """PCM16 mono speech of `text` at `rate` Hz, in `voice`."""
    _needs(voice)
    return speech.spoken(text, rate, voice)


def forget() -> None:
    """Drop every rendition made so far: the next request speaks afresh."""
    speech.forget()
    _spoken_cut.cache_clear()


def _espeak_split(text: str, after_words: int, pause_ms: int) -> tuple[bytes, int, int]:
    """espeak-ng speaking `text` as one sentence with an SSML break after its first
    words: (PCM16, rate, byte offset where the break's silence starts)."""
    pcm, rate = espeak_paused(text, after_words, pause_ms)
    # The break is the longest run of near-silence inside the speech.
    quiet = np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.int32)) < 30
    best_start, best_len, run_start = 0, 0, 0
    for i, q in enumerate(np.append(quiet, False)):
        if not q:
            # Not the silence before the first word or after the last.
            if i - run_start > best_len and 0 < run_start and i < len(quiet):
                best_start, best_len = run_start, i - run_start
            run_start = i + 1
    return pcm, rate, best_start * 2


def spoken_paused(
    text: str, after_words: int, pause_ms: int, rate: int = 24000, voice: Voice = "piper"
) -> bytes:
    """`text` spoken as one sentence with a pause of about `pause_ms` after its first
    `after_words` words (bench/lib/speech.py says how each voice pauses)."""
    _needs(voice)
    return speech.spoken_paused(text, after_words, pause_ms, rate, voice)


def spoken_cut(text: str, after_words: int, rate: int = 24000, voice: Voice = "piper") -> bytes:
    """The first `after_words` words of `text` as they sound inside the whole sentence:
    speech broken off mid-sentence (a truncated sentence spoken alone would end in the
    falling tone of a complete one)."""
    _needs(voice)
    return _spoken_cut(text, after_words, rate, voice)


@cache
def _spoken_cut(text: str, after_words: int, rate: int, voice: Voice) -> bytes:
    if voice == "espeak":
        pcm, native_rate, cut = _espeak_split(text, after_words, 1000)
        pcm = pcm[:cut]
    else:
        pcm, native_rate = piper_split(text, after_words)[0], 24000
    return pcm if rate == native_rate else resample_pcm16(pcm, native_rate, rate)


def weather_question() -> bytes:
    """The question most contract tests ask, as a microphone hears it: 300 ms of
    silence, "What is the weather like today?" in Piper's voice, 900 ms of silence
    (long enough for server VAD to end the turn). Made in the test that first asks."""
    return silence(300) + spoken("What is the weather like today?") + silence(900)
