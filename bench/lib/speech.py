"""Speech made at run time by two unrelated voices: Piper (the stack's own TTS) and
espeak-ng (formant synthesis, other prosody), so a benchmark that hears only the
voice the stack speaks with does not flatter it. The tests' fixtures
(tests/support/speech.py) are these renditions, behind their tier checks."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import wave
from functools import cache
from typing import Literal
from xml.sax.saxutils import escape

import numpy as np

from antiphon.common.audio import resample_pcm16
from antiphon.stage1.backends.piper.assets import locate
from antiphon.stage1.backends.piper.tts import PiperTts

Voice = Literal["piper", "espeak"]
VOICES: tuple[Voice, ...] = ("piper", "espeak")
ESPEAK_HINT = "espeak-ng is not installed: apt-get install -y espeak-ng"
# A word boundary from Piper's marks is moved to the quietest 10 ms within this
# reach: a mark may fall a little into the next word's onset or the last one's tail.
_SNAP_MS = 80


@cache
def piper_voice() -> PiperTts:
    assets = locate()
    # Not varied: Piper's sampled noise made one rendition in twenty heard as
    # "capital of friends" on CPUs without AVX-512 (CTranslate2's int8 kernels
    # differ by ISA), so a fixture passed here and failed in CI.
    return PiperTts(assets.voice_onnx, assets.voice_config, threads=1, out_rate=24000, varied=False)


def espeak_wav(text: str, ssml: bool = False) -> tuple[bytes, int]:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError(ESPEAK_HINT)
    markup = ["-m"] if ssml else []
    wav = subprocess.run(
        [exe, *markup, "-v", "en-us", "-s", "150", "--stdout", text],
        check=True,
        capture_output=True,
    ).stdout
    with wave.open(io.BytesIO(wav)) as w:
        return w.readframes(w.getnframes()), w.getframerate()


def silence(ms: int, rate: int = 24000) -> bytes:
    return b"\x00\x00" * (rate * ms // 1000)


@cache
def spoken(text: str, rate: int = 24000, voice: Voice = "piper") -> bytes:
    """PCM16 mono speech of `text` at `rate` Hz, in `voice`."""
    if voice == "espeak":
        pcm, native_rate = espeak_wav(text)
    else:
        pcm, native_rate = b"".join(c.pcm16 for c in piper_voice().synthesize(text)), 24000
    return pcm if rate == native_rate else resample_pcm16(pcm, native_rate, rate)


@cache
def spoken_paused(
    text: str, after_words: int, pause_ms: int, rate: int = 24000, voice: Voice = "piper"
) -> bytes:
    """`text` spoken as one sentence with a pause of about `pause_ms` after its first
    `after_words` words: a speaker hesitating mid-sentence, without the falling tone
    that ends a sentence. espeak pauses by an SSML break; Piper's audio is cut where
    its word marks end that word and `pause_ms` of silence is put in."""
    if voice == "espeak":
        pcm, native_rate = espeak_paused(text, after_words, pause_ms)
    else:
        head, tail = piper_split(text, after_words)
        pcm, native_rate = head + silence(pause_ms, 24000) + tail, 24000
    return pcm if rate == native_rate else resample_pcm16(pcm, native_rate, rate)


def spoken_or_noise(text: str, voice: Voice = "piper", rate: int = 24000) -> bytes:
    """`spoken`, or for Piper a noise burst of about the speech's length when its voice
    is not installed: the synthetic stages hear only how long a question is."""
    if voice == "espeak":
        return spoken(text, rate, voice)
    try:
        return spoken(text, rate, voice)
    except Exception as exc:  # the voice's assets are missing
        print(f"no Piper voice ({exc}); using noise bursts", file=sys.stderr)
        rng = np.random.default_rng(len(text))
        n = rate * (600 + 40 * len(text)) // 1000
        return (rng.normal(0, 3000, n).clip(-32768, 32767).astype("<i2")).tobytes()


def forget() -> None:
    """Drop every rendition made so far: the next request speaks afresh."""
    spoken.cache_clear()
    spoken_paused.cache_clear()


def piper_split(text: str, after_words: int) -> tuple[bytes, bytes]:
    """Piper's audio (24 kHz) of `text` as one sentence, split after its first words."""
    (chunk,) = [c for c in piper_voice().synthesize(text) if c.pcm16]
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


def espeak_paused(text: str, after_words: int, pause_ms: int) -> tuple[bytes, int]:
    """espeak-ng speaking `text` as one sentence with an SSML break after its first words."""
    words = text.split()
    if not 0 < after_words < len(words):
        raise ValueError(f"cannot split {text!r} after {after_words} words")
    head, tail = (escape(" ".join(part)) for part in (words[:after_words], words[after_words:]))
    return espeak_wav(f'<speak>{head} <break time="{pause_ms}ms"/> {tail}</speak>', ssml=True)
