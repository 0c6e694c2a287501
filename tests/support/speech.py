"""Spoken test fixtures, made at test time with the Piper voice."""

from __future__ import annotations

from functools import cache

from antiphon.common.audio import resample_pcm16
from antiphon.stage1.assets import locate
from antiphon.stage1.tts import PiperTts


@cache
def _voice() -> PiperTts:
    assets = locate()
    return PiperTts(assets.voice_onnx, assets.voice_config, threads=1, out_rate=24000)


@cache
def spoken(text: str, rate: int = 24000) -> bytes:
    """PCM16 mono speech of `text` at `rate` Hz."""
    pcm = b"".join(c.pcm16 for c in _voice().synthesize(text))
    return pcm if rate == 24000 else resample_pcm16(pcm, 24000, rate)


def silence(ms: int, rate: int = 24000) -> bytes:
    return b"\x00\x00" * (rate * ms // 1000)
