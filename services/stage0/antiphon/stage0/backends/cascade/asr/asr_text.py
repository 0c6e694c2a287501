"""What both Whisper engines (asr.py, whisper_torch.py) do around a decode:
the audio they are given, and the text they let through."""

from __future__ import annotations

import re

from antiphon.common import stage_audio

SAMPLE_RATE = stage_audio.RATE
# Whisper's whole window, in feature frames: longer audio is cut to it.
MAX_FRAMES = 3000
# Trailing silence after the audio. With less than about 4 s, Whisper often
# repeats a short question until its token budget runs out (measured).
PAD_S = 4.0
# A decode Whisper believes holds no speech (its own thresholds).
NO_SPEECH_PROB = 0.6
NO_SPEECH_LOGPROB = -1.0


def token_budget(seconds: float) -> int:
    """Tokens a decode of `seconds` of audio may take: speech runs at most a
    few tokens a second, and a bound stops a looping decode."""
    return int(20 + 8 * seconds)


def heard(text: str, avg_logprob: float, no_speech_prob: float) -> str:
    """A decode's text as the user said it: "" where Whisper heard no speech."""
    if no_speech_prob > NO_SPEECH_PROB and avg_logprob < NO_SPEECH_LOGPROB:
        return ""
    return drop_repeats(text.strip())


_SENTENCE = re.compile(r"[^.?!]+[.?!]*")


def drop_repeats(text: str) -> str:
    """Cut a decode that fell into repeating its last sentence.

    A short window still sometimes makes Whisper say a question twice; people
    almost never say the same sentence twice in a row, so the copies go, and
    so does a cut-off copy at the end.
    """
    sentences = [s.strip() for s in _SENTENCE.findall(text) if s.strip()]
    kept: list[str] = []
    for sentence in sentences:
        if kept and (sentence == kept[-1] or kept[-1].startswith(sentence)):
            continue
        kept.append(sentence)
    return " ".join(kept)
