"""Spoken test fixtures, made at test time by two unrelated voices.

Piper is also the stack's own TTS, so a suite that only hears Piper can pass
while real voices fail; espeak-ng (formant synthesis, other prosody) is the
second voice every lane is tested with. Piper is a model engine: a test
that hears it is marked `models` (`tests/support/tiers.py`); espeak-ng is not.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import wave
from functools import cache
from typing import Literal
from xml.sax.saxutils import escape

import numpy as np

from antiphon.common.audio import resample_pcm16
from antiphon.stage1.assets import locate
from antiphon.stage1.tts import PiperTts
from tests.support import tiers

Voice = Literal["piper", "espeak"]
VOICES: tuple[Voice, ...] = ("piper", "espeak")


@cache
def _piper() -> PiperTts:
    assets = locate()
    # Not varied: Piper's sampled noise made one rendition in twenty heard as
    # "capital of friends" on CPUs without AVX-512 (CTranslate2's int8 kernels
    # differ by ISA), so a fixture passed here and failed in CI.
    return PiperTts(assets.voice_onnx, assets.voice_config, threads=1, out_rate=24000, varied=False)


def _espeak(text: str) -> tuple[bytes, int]:
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise RuntimeError("espeak-ng is not installed: apt-get install -y espeak-ng")
    wav = subprocess.run(
        [espeak, "-v", "en-us", "-s", "150", "--stdout", text], check=True, capture_output=True
    ).stdout
    with wave.open(io.BytesIO(wav)) as w:
        return w.readframes(w.getnframes()), w.getframerate()


def _needs(voice: Voice) -> None:
    """Checked before the caches: a test that reuses speech made for another uses Piper too."""
    if voice == "piper":
        tiers.require_marker(tiers.MODELS, "synthesizes speech with Piper")


def spoken(text: str, rate: int = 24000, voice: Voice = "piper") -> bytes:
    """PCM16 mono speech of `text` at `rate` Hz, in `voice`."""
    _needs(voice)
    return _spoken(text, rate, voice)


@cache
def _spoken(text: str, rate: int, voice: Voice) -> bytes:
    if voice == "espeak":
        pcm, native_rate = _espeak(text)
    else:
        pcm, native_rate = b"".join(c.pcm16 for c in _piper().synthesize(text)), 24000
    return pcm if rate == native_rate else resample_pcm16(pcm, native_rate, rate)


def forget() -> None:
    """Drop every rendition made so far: the next request speaks afresh."""
    for cached in (_spoken, _spoken_paused, _spoken_cut):
        cached.cache_clear()


def silence(ms: int, rate: int = 24000) -> bytes:
    return b"\x00\x00" * (rate * ms // 1000)


# A word boundary from Piper's marks is moved to the quietest 10 ms within this
# reach: a mark may fall a little into the next word's onset or the last one's tail.
_SNAP_MS = 80


def _piper_split(text: str, after_words: int) -> tuple[bytes, bytes]:
    """Piper's audio (24 kHz) of `text` as one sentence, split after its first words."""
    (chunk,) = [c for c in _piper().synthesize(text) if c.pcm16]
    words = list(re.finditer(r"\S+", chunk.text))
    if not 0 < after_words < len(words):
        raise ValueError(f"cannot split {text!r} after {after_words} words")
    end_char = words[after_words - 1].end()
    mark_ms = next(ms for chars, ms in chunk.marks if chars >= end_char)
    samples = np.frombuffer(chunk.pcm16, dtype="<i2").astype(np.float64)
    per_ms = 24
    frame = 10 * per_ms
    lo = max(0, (mark_ms - _SNAP_MS) * per_ms)
    hi = min(len(samples) - frame, (mark_ms + _SNAP_MS) * per_ms)
    starts = range(lo, max(lo, hi) + 1, per_ms)
    quietest = min(starts, key=lambda s: float(np.abs(samples[s : s + frame]).mean()))
    cut = (quietest + frame // 2) * 2
    return chunk.pcm16[:cut], chunk.pcm16[cut:]


def _espeak_split(text: str, after_words: int, pause_ms: int) -> tuple[bytes, int, int]:
    """espeak-ng speaking `text` as one sentence with an SSML break after its first
    words: (PCM16, rate, byte offset where the break's silence starts)."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise RuntimeError("espeak-ng is not installed: apt-get install -y espeak-ng")
    words = text.split()
    if not 0 < after_words < len(words):
        raise ValueError(f"cannot split {text!r} after {after_words} words")
    head, tail = (escape(" ".join(part)) for part in (words[:after_words], words[after_words:]))
    ssml = f'<speak>{head} <break time="{pause_ms}ms"/> {tail}</speak>'
    wav = subprocess.run(
        [espeak, "-m", "-v", "en-us", "-s", "150", "--stdout", ssml],
        check=True,
        capture_output=True,
    ).stdout
    with wave.open(io.BytesIO(wav)) as w:
        pcm, rate = w.readframes(w.getnframes()), w.getframerate()
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
    `after_words` words: a speaker hesitating mid-sentence, without the falling tone
    that ends a sentence. espeak pauses by an SSML break; Piper's audio is cut where
    its word marks end that word and `pause_ms` of silence is put in."""
    _needs(voice)
    return _spoken_paused(text, after_words, pause_ms, rate, voice)


@cache
def _spoken_paused(text: str, after_words: int, pause_ms: int, rate: int, voice: Voice) -> bytes:
    if voice == "espeak":
        pcm, native_rate, _ = _espeak_split(text, after_words, pause_ms)
    else:
        head, tail = _piper_split(text, after_words)
        pcm, native_rate = head + silence(pause_ms, 24000) + tail, 24000
    return pcm if rate == native_rate else resample_pcm16(pcm, native_rate, rate)


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
        pcm, native_rate = _piper_split(text, after_words)[0], 24000
    return pcm if rate == native_rate else resample_pcm16(pcm, native_rate, rate)


def weather_question() -> bytes:
    """The question most contract tests ask, as a microphone hears it: 300 ms of
    silence, "What is the weather like today?" in Piper's voice, 900 ms of silence
    (long enough for server VAD to end the turn). Made in the test that first asks."""
    return silence(300) + spoken("What is the weather like today?") + silence(900)
