"""Speech probabilities for a real endpointer, frame by frame: what the
tests of the parts that watch it (pauses, partial transcripts) feed it."""

from __future__ import annotations

from antiphon.stage0.backends.cascade.listening.vad import EndpointerConfig

FRAME = 20  # ms a frame
SPEECH, QUIET = 0.9, 0.0
# Speech is confirmed 100 ms into it; silence ends the turn after 500 ms.
CONFIG = EndpointerConfig(silence_duration_ms=500, min_speech_ms=100)


def frames(ms: int, probability: float) -> list[float]:
    return [probability] * (ms // FRAME)
