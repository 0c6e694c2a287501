"""The audio the cascade's stage0 hears: PCM16 mono at 16 kHz.

Silero VAD, Smart Turn and Whisper all take 16 kHz. Each stage0 backend says
the rate it hears in `capabilities.input_sample_rate_hz` (0: this one; Mimi,
the `moshi` backend's codec, hears 24 kHz), and the session resamples every
input to it, once.
"""

from __future__ import annotations

RATE = 16_000
BYTES_PER_MS = RATE * 2 // 1000
