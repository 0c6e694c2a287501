"""Spoken test fixtures, made at test time by two unrelated voices.

Piper is also the stack's own TTS, so a suite that only hears Piper can pass
while real voices fail; espeak-ng (formant synthesis, other prosody) is the
second voice every lane is tested with.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from functools import cache
from typing import Literal

from antiphon.common.audio import resample_pcm16
from antiphon.stage1.assets import locate
from antiphon.stage1.tts import PiperTts

Voice = Literal["piper", "espeak"]
VOICES: tuple[Voice, ...] = ("piper", "espeak")


@cache
def _piper() -> PiperTts:
    assets = locate()
    return PiperTts(assets.voice_onnx, assets.voice_config, threads=1, out_rate=24000)


def _espeak(text: str) -> tuple[bytes, int]:
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise RuntimeError("espeak-ng is not installed: apt-get install -y espeak-ng")
    wav = subprocess.run(
        [espeak, "-v", "en-us", "-s", "150", "--stdout", text], check=True, capture_output=True
    ).stdout
    with wave.open(io.BytesIO(wav)) as w:
        return w.readframes(w.getnframes()), w.getframerate()


@cache
def spoken(text: str, rate: int = 24000, voice: Voice = "piper") -> bytes:
    """PCM16 mono speech of `text` at `rate` Hz, in `voice`."""
    if voice == "espeak":
        pcm, native_rate = _espeak(text)
    else:
        pcm, native_rate = b"".join(c.pcm16 for c in _piper().synthesize(text)), 24000
    return pcm if rate == native_rate else resample_pcm16(pcm, native_rate, rate)


def silence(ms: int, rate: int = 24000) -> bytes:
    return b"\x00\x00" * (rate * ms // 1000)
