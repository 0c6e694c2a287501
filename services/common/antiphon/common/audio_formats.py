"""The audio formats a session may speak, and PCM16 into an output one.

One table for every tier: the gateway refuses a format outside it at the
edge, the session validates the whole configuration against it, and both
name the encodings by these constants. Between the tiers audio is PCM16
mono; the gateway decodes what clients send (`antiphon.gateway.translate.audio_formats`),
and the session encodes each audio delta in its output format (`encode`), so
the bytes it journals are the bytes the client hears.
"""

from __future__ import annotations

from dataclasses import dataclass

from antiphon.common.audio import resample_pcm16
from antiphon.common.g711 import pcm16_to_alaw, pcm16_to_ulaw

PCM16 = "pcm16"
PCM_F32LE = "pcm_f32le"
G711_ULAW = "g711_ulaw"
G711_ALAW = "g711_alaw"

G711 = (G711_ULAW, G711_ALAW)
# ITU-T G.711 is 8 kHz by definition: a G.711 format names no other rate.
G711_RATE = 8000

# What a session may declare for its input and output audio.
INPUT_ENCODINGS = (PCM16, PCM_F32LE, *G711)
OUTPUT_ENCODINGS = (PCM16, *G711)
# OpenAI's `audio/pcm` rate, in and out, and the rate every stage1 backend
# speaks: PCM output is at this rate alone, and a session's PCM input is at it
# until the session declares another. The one place 24 kHz is stated.
PCM_OUTPUT_RATE = 24000
# Raw PCM input declares no rate of its own: the session's, one of these.
PCM_INPUT_RATES = (16000, PCM_OUTPUT_RATE)
# Every rate an append may carry once decoded (WAV names its own, G.711 is
# 8 kHz); the session resamples each once, in mailbox order.
INPUT_RATES = (8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000)


def allowed_rates(encoding: str, pcm_rates: tuple[int, ...]) -> tuple[int, ...]:
    """The rates a format of `encoding` may have: G.711's own, or `pcm_rates`."""
    return (G711_RATE,) if encoding in G711 else pcm_rates


@dataclass(frozen=True)
class Encoded:
    """Output audio in its encoding, at `sample_rate_hz`."""

    audio: bytes
    sample_rate_hz: int


def encode(pcm16: bytes, rate: int, encoding: str) -> Encoded:
    """PCM16 at `rate` as `encoding` (one of OUTPUT_ENCODINGS; "" is PCM16).

    G.711 is resampled to 8 kHz first when the audio is at another rate,
    whole chunk at a time: chunks are clauses that begin and end in
    near-silence, so no filter state needs to cross a chunk boundary.
    """
    if encoding not in G711:
        return Encoded(pcm16, rate)
    if rate != G711_RATE:
        pcm16 = resample_pcm16(pcm16, rate, G711_RATE)
    coded = pcm16_to_ulaw(pcm16) if encoding == G711_ULAW else pcm16_to_alaw(pcm16)
    return Encoded(coded, G711_RATE)
