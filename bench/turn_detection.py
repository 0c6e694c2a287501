"""End of turn on spoken fixtures: semantic_vad (Smart Turn) against server_vad.

    python -m bench.turn_detection

Feeds spoken fixtures, in two voices (Piper and espeak-ng), through stage0's
own endpointers on the audio's clock, one 32 ms Silero frame at a time:
`server_vad` with OpenAI's defaults (500 ms of silence) and `semantic_vad`
(Silero's silence onsets, then Smart Turn as stage0's `CascadeSession` asks
it, for each eagerness). Two sets:

- complete: whole questions and requests. Reported: the median delay from
  the end of the speech (its last sample above a fixed level) to the turn's
  end (`audio_end_ms`), and how many were split before their last word.
- paused: sentences with a ~700 ms pause after a mid-sentence word, spoken
  as one sentence (espeak: an SSML break; Piper: its audio cut at a word
  mark, silence put in). Reported: how many each rule split at the pause
  (or anywhere before the last word) instead of waiting.

Piper samples noise as it speaks, so its fixtures differ from one synthesis
to the next, and Smart Turn's answers on borderline ones with them: each
repeat (`--repeats`) synthesizes them afresh and the counts are over all.
The model's answers are applied on the audio clock at once; a real worker
adds a model call (`model.call_ms`, measured here too) to semantic_vad's
delays. Prints JSON and writes bench/results/turn-detection.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from antiphon.stage0.assets import locate_turn, locate_vad
from antiphon.stage0.backends.cascade.listening.turn import (
    EAGERNESS,
    WINDOW_SAMPLES,
    SemanticEndpointer,
    SmartTurn,
)
from antiphon.stage0.backends.cascade.listening.vad import (
    FRAME_SAMPLES,
    EndpointerConfig,
    SileroVad,
    SpeechStarted,
    SpeechStopped,
)
from bench.lib.questions import LONG_ANSWER, QUESTIONS
from bench.lib.results import RESULTS
from bench.lib.speech import VOICES, Voice, forget, silence, spoken, spoken_paused

RATE = 16_000
BYTES_PER_MS = 32
FRAME_BYTES = FRAME_SAMPLES * 2
LEAD_MS = 500
TAIL_MS = 9000  # past the longest wait (low: 8 s)
PAUSE_MS = 700
SPEECH_LEVEL = 300  # PCM16 amplitude that counts as speech when finding where it ends
OUT = RESULTS / "turn-detection.json"

# The questions the stack benchmarks ask, and two more requests.
COMPLETE = [
    *QUESTIONS,
    LONG_ANSWER,
    "Please set a timer for ten minutes.",
    "I would like a large pizza please.",
]
# (sentence, words before the pause): each pause follows a word the sentence
# cannot end on, where speakers hesitate.
PAUSED = [
    ("I would like to order a large pizza please.", 5),
    ("Can you tell me about the history of Rome?", 5),
    ("I need to book a flight to Paris for next week.", 7),
    ("So I was thinking that we could go to the beach tomorrow.", 6),
    ("What I really want is a quiet place to read.", 5),
    ("Yesterday I went to the market and bought some apples.", 5),
    ("My favorite thing to eat is chocolate ice cream.", 6),
    ("Could you remind me to call my mother tonight?", 5),
]
MODES = ("server_vad", "semantic_vad:high", "semantic_vad:auto", "semantic_vad:low")


@dataclass
class Fixture:
    kind: str  # "complete" or "paused"
    voice: Voice
    text: str
    pcm16: bytes
    speech_end_ms: int


def fixture(kind: str, voice: Voice, text: str, speech: bytes) -> Fixture:
    loud = np.nonzero(np.abs(np.frombuffer(speech, dtype="<i2").astype(np.int32)) > SPEECH_LEVEL)
    end_ms = LEAD_MS + int(loud[0][-1]) * 1000 // RATE
    pcm = silence(LEAD_MS, RATE) + speech + silence(TAIL_MS, RATE)
    return Fixture(kind, voice, text, pcm, end_ms)


def fixtures() -> list[Fixture]:
    """Every fixture, spoken afresh."""
    forget()
    out: list[Fixture] = []
    for voice in VOICES:
        out += [fixture("complete", voice, t, spoken(t, RATE, voice)) for t in COMPLETE]
        out += [
            fixture("paused", voice, t, spoken_paused(t, k, PAUSE_MS, RATE, voice))
            for t, k in PAUSED
        ]
    return out


class Detector:
    """One session's end-of-turn rule, driven frame by frame as stage0 drives it."""

    def __init__(self, mode: str, vad: SileroVad, model: SmartTurn) -> None:
        self._model = model
        self._semantic: SemanticEndpointer | None = None
        silence_ms = EndpointerConfig().silence_duration_ms
        if mode.startswith("semantic_vad:"):
            self._semantic = SemanticEndpointer(EAGERNESS[mode.split(":")[1]])
            silence_ms = self._semantic.max_silence_ms
        self._stream = vad.stream(EndpointerConfig(silence_duration_ms=silence_ms))
        self.call_ms: list[float] = []

    def ends(self, pcm16: bytes) -> list[int]:
        """`audio_end_ms` of every turn end the rule finds in `pcm16`."""
        ends: list[int] = []
        utterance_start = 0
        for i in range(0, len(pcm16) - FRAME_BYTES + 1, FRAME_BYTES):
            for event in self._stream.feed(pcm16[i : i + FRAME_BYTES]):
                if isinstance(event, SpeechStarted):
                    utterance_start = event.audio_start_ms
                elif isinstance(event, SpeechStopped):
                    ends.append(event.audio_end_ms)
            if self._semantic is None:
                continue
            endpointer = self._stream.endpointer
            check = self._semantic.due(endpointer)
            if check is None:
                continue
            # As CascadeSession: the utterance so far (from its padded start), last 8 s.
            end = check.at_ms * BYTES_PER_MS
            begin = max(utterance_start * BYTES_PER_MS, end - WINDOW_SAMPLES * 2)
            t0 = time.perf_counter()
            (probability,) = self._model.predict([pcm16[begin:end]])
            self.call_ms.append((time.perf_counter() - t0) * 1000)
            stopped = self._semantic.decide(check, float(probability), endpointer)
            if stopped is not None:
                ends.append(stopped.audio_end_ms)
        return ends


def run(mode: str, cases: list[Fixture], vad: SileroVad, model: SmartTurn) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    calls: list[float] = []
    for case in cases:
        detector = Detector(mode, vad, model)
        ends = detector.ends(case.pcm16)
        calls += detector.call_ms
        early = [e for e in ends if e < case.speech_end_ms]
        final = [e for e in ends if e >= case.speech_end_ms]
        rows.append(
            {
                "kind": case.kind,
                "voice": case.voice,
                "text": case.text,
                "split_early": bool(early),
                "end_delay_ms": final[0] - case.speech_end_ms if final else None,
                "model_calls": len(detector.call_ms),
            }
        )
    out: dict[str, Any] = {}
    for kind in ("complete", "paused"):
        mine = [r for r in rows if r["kind"] == kind]
        out[kind] = {
            "end_delay_ms_median": _median_delay(mine),
            "end_delay_ms_by_voice": {
                v: _median_delay([r for r in mine if r["voice"] == v]) for v in VOICES
            },
            "split_early": sum(r["split_early"] for r in mine),
            "split_early_by_voice": {
                v: sum(r["split_early"] for r in mine if r["voice"] == v) for v in VOICES
            },
            "fixtures": len(mine),
        }
    out["model_calls"] = len(calls)
    out["rows"] = rows
    return out


def _median_delay(rows: list[dict[str, Any]]) -> float | None:
    delays = [r["end_delay_ms"] for r in rows if r["end_delay_ms"] is not None]
    return statistics.median(delays) if delays else None


def model_cost(model: SmartTurn, batch: int, repeats: int = 3) -> dict[str, float]:
    """One window per call against `batch` windows in one call (medians of `repeats`)."""
    rng = np.random.default_rng(0)
    windows = [
        (rng.standard_normal(WINDOW_SAMPLES) * 1600).astype("<i2").tobytes() for _ in range(batch)
    ]
    model.predict(windows[:1])  # warm up
    one: list[float] = []
    batched: list[float] = []
    for _ in range(repeats):
        for w in windows:
            t0 = time.perf_counter()
            model.predict([w])
            one.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        model.predict(windows)
        batched.append((time.perf_counter() - t0) * 1000 / batch)
    return {
        "call_ms": round(statistics.median(one), 1),
        f"batch{batch}_ms_per_window": round(statistics.median(batched), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.turn_detection", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads per model")
    parser.add_argument("--repeats", type=int, default=3, help="syntheses of each fixture")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    turn = locate_turn()
    model = SmartTurn(turn.onnx, turn.features, threads=args.threads)
    vad = SileroVad(locate_vad(), threads=args.threads)
    cases = [case for _ in range(args.repeats) for case in fixtures()]
    modes = {mode: run(mode, cases, vad, model) for mode in MODES}
    summary: dict[str, Any] = {
        "fixtures": {
            "voices": list(VOICES),
            "complete": len(COMPLETE) * len(VOICES),
            "paused": len(PAUSED) * len(VOICES),
            "pause_ms": PAUSE_MS,
            "repeats": args.repeats,
        },
        "eagerness": {
            name: {"threshold": e.threshold, "max_silence_ms": e.max_silence_ms}
            for name, e in EAGERNESS.items()
        },
        "server_vad_silence_duration_ms": EndpointerConfig().silence_duration_ms,
        "complete_end_delay_ms_median": {
            m: r["complete"]["end_delay_ms_median"] for m, r in modes.items()
        },
        "paused_end_delay_ms_median": {
            m: r["paused"]["end_delay_ms_median"] for m, r in modes.items()
        },
        "paused_split_early": {
            m: f"{r['paused']['split_early']}/{r['paused']['fixtures']}" for m, r in modes.items()
        },
        "complete_split_early": {
            m: f"{r['complete']['split_early']}/{r['complete']['fixtures']}"
            for m, r in modes.items()
        },
        "model": {"threads": args.threads, **model_cost(model, 8)},
        "modes": modes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    brief = {k: v for k, v in summary.items() if k != "modes"}
    brief["by_voice"] = {
        m: {
            "complete_end_delay_ms_median": r["complete"]["end_delay_ms_by_voice"],
            "paused_split_early": r["paused"]["split_early_by_voice"],
        }
        for m, r in modes.items()
    }
    print(json.dumps(brief, indent=2))


if __name__ == "__main__":
    main()
