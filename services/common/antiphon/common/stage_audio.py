"""The audio stage0 hears: PCM16 mono at 16 kHz.

Silero VAD, Smart Turn and Whisper all take 16 kHz, so the session
resamples every input to it, once, and stage0 never sees another rate.
"""

from __future__ import annotations

RATE = 16_000
BYTES_PER_MS = RATE * 2 // 1000
