"""The questions the benchmarks ask, and the recorded speech the GPU benchmarks play.

`QUESTIONS` are spoken by the voices here (bench.lib.speech) at run time.
`RECORDED` holds four questions spoken once by Piper at 16 kHz (`python -m
bench.gpu --make-speech`), because the GPU machine has no voice to speak them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.lib.results import REPO

QUESTIONS = (
    "What is the capital of France?",
    "How many legs does a spider have?",
    "What color is the sky on a clear day?",
    "Can you name a fruit that is yellow?",
    "What is two plus two?",
)
# A question whose answer is long enough to interrupt (load's barge-in trials).
LONG_ANSWER = "Tell me a long story about a brave knight and a dragon."

RECORDED = REPO / "bench" / "fixtures" / "gpu_speech.npz"
RECORDED_QUESTIONS = (
    "What is the capital of France?",
    "How far away is the moon?",
    "Can you suggest a name for my new puppy?",
    "What should I cook for dinner tonight?",
)
RECORDED_RATE = 16000


def load_recorded() -> list[bytes]:
    """`RECORDED`'s questions as PCM16 mono at `RECORDED_RATE`, in order."""
    with np.load(RECORDED) as data:
        return [data[f"q{i}"].astype("<i2").tobytes() for i in range(len(RECORDED_QUESTIONS))]


def record(path: Path = RECORDED) -> None:
    """Speak `RECORDED_QUESTIONS` once with Piper (the stack's voice) into `path` (run here)."""
    from bench.lib.speech import spoken  # Piper: here only, never on the GPU machine

    rate = RECORDED_RATE
    arrays = {}
    for i, text in enumerate(RECORDED_QUESTIONS):
        pcm = np.frombuffer(spoken(text, rate=rate, voice="piper"), dtype="<i2")
        loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 500)
        # Trimmed to the speech, then 300 ms of silence either side (a mic's pause).
        pad = np.zeros(rate * 3 // 10, dtype=np.int16)
        arrays[f"q{i}"] = np.concatenate((pad, pcm[loud[0] : loud[-1] + 1], pad))
    np.savez_compressed(path, texts=np.array(RECORDED_QUESTIONS), **arrays)  # type: ignore[arg-type]
    sizes = {k: f"{len(v) / rate:.2f}s" for k, v in arrays.items()}
    print(f"wrote {path} ({path.stat().st_size} bytes): {sizes}")
