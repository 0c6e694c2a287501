"""`semantic_vad`: Smart Turn v3.2 on onnxruntime, batched across sessions, and its rule.

Silero (vad.py) still finds speech and silence. In `semantic_vad` the
endpointer's silence timeout is the eagerness's longest wait, and
`SemanticEndpointer` asks the end-of-turn model about the utterance heard so
far once the silence after speech has lasted the eagerness's first check,
and again every `RECHECK_MS` while it grows. A probability at or above the
eagerness's threshold ends the turn at once; speech resuming first makes the
answer moot.

| eagerness | first asked after | ends at once when p >= | longest silence |
| --- | --- | --- | --- |
| `high` | 120 ms | 0.3 | 2 s |
| `medium`, `auto` | 200 ms | 0.5 | 4 s |
| `low` | 200 ms | 0.7 | 8 s |

The longest waits are OpenAI's (8 s, 4 s, 2 s for low, medium, high); the
thresholds put `medium` at the model's own decision point (0.5). `high`
("as soon as possible", OpenAI says) is asked 80 ms sooner: on the spoken
fixtures of bench/turn_detection.py that ends complete questions ~100 ms
sooner (median 196 against 293 ms after the speech) and splits 6 more of
48 sentences at a 700 ms pause (39 against 33).

The model and its feature extractor ship in the `pipecat-ai` wheel
(installed without its dependencies). The extractor is loaded from its file:
importing any `pipecat` package would run `__init__`s that need what was not
installed. Its int8 products are summed exactly on every x86 CPU, as VNNI
sums them (exact_int8.py): AVX2's kernels saturate, and moved its answers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Protocol, cast

import numpy as np
import numpy.typing as npt

from antiphon.stage0.backends.cascade.listening.exact_int8 import exact_int8_session
from antiphon.stage0.backends.cascade.listening.vad import SAMPLE_RATE, Endpointer, SpeechStopped

log = logging.getLogger(__name__)

# Smart Turn v3 sees the last 8 s of 16 kHz audio, zero-padded at the front.
WINDOW_SAMPLES = 8 * SAMPLE_RATE
# Silence after speech before the first question to the model (pipecat asks
# Smart Turn once its VAD has heard 200 ms of silence; `high` asks sooner),
# then how often it is asked again while the silence lasts.
FIRST_CHECK_MS = 200
EAGER_FIRST_CHECK_MS = 120
RECHECK_MS = 500

Float32Array = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Eagerness:
    """How sure the model must be to end a turn early, the longest silence waited,
    and the silence after which the model is first asked."""

    threshold: float
    max_silence_ms: int
    first_check_ms: int = FIRST_CHECK_MS


EAGERNESS: dict[str, Eagerness] = {
    "high": Eagerness(threshold=0.3, max_silence_ms=2000, first_check_ms=EAGER_FIRST_CHECK_MS),
    "medium": Eagerness(threshold=0.5, max_silence_ms=4000),
    "low": Eagerness(threshold=0.7, max_silence_ms=8000),
}
# OpenAI: `auto` is the default and is equivalent to `medium`.
EAGERNESS["auto"] = EAGERNESS["medium"]


def eagerness(name: str) -> Eagerness:
    """The named eagerness; unset or unknown (the session refuses those) is `auto`."""
    return EAGERNESS.get(name or "auto", EAGERNESS["auto"])


# ------------------------------------------------------------ the rule (pure)


@dataclass(frozen=True)
class TurnCheck:
    """A question for the model: is the utterance up to `at_ms` a complete turn?"""

    at_ms: int
    # Start of the silence it was asked in: the answer only counts in that silence.
    silence_start_ms: int


class SemanticEndpointer:
    """When to ask the end-of-turn model, and what its answer means. Pure: no model.

    The Silero `Endpointer` it watches runs with `max_silence_ms` as its
    silence duration, so the turn ends there whatever the model says.
    """

    def __init__(
        self,
        level: Eagerness,
        *,
        recheck_ms: int = RECHECK_MS,
    ) -> None:
        if not 0.0 < level.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {level.threshold}")
        if level.first_check_ms <= 0 or recheck_ms <= 0:
            raise ValueError("check intervals must be positive")
        self.level = level
        self._first_check_ms = level.first_check_ms
        self._recheck_ms = recheck_ms
        # The silence last asked about, and how long it had lasted then.
        self._asked_silence: int | None = None
        self._asked_after_ms = 0
        self._in_flight = False

    @property
    def max_silence_ms(self) -> int:
        return self.level.max_silence_ms

    def due(self, endpointer: Endpointer) -> TurnCheck | None:
        """After the VAD ran: the question to ask now, if one is due (one at a time)."""
        start = endpointer.silence_start_ms
        if not endpointer.in_speech or start is None or self._in_flight:
            return None
        silence = endpointer.now_ms - start
        if start != self._asked_silence:
            if silence < self._first_check_ms:
                return None
        elif silence < self._asked_after_ms + self._recheck_ms:
            return None
        self._asked_silence = start
        self._asked_after_ms = silence
        self._in_flight = True
        return TurnCheck(at_ms=endpointer.now_ms, silence_start_ms=start)

    def decide(
        self, check: TurnCheck, probability: float, endpointer: Endpointer
    ) -> SpeechStopped | None:
        """The model's answer to `check`: the turn's end, or None to keep waiting.

        The turn ends where the audio the model judged ends (`check.at_ms`),
        however long the answer took. An answer about a silence that is over
        (speech resumed, the turn already ended, the input was cleared) ends
        nothing.
        """
        self._in_flight = False
        if probability < self.level.threshold:
            return None
        if not endpointer.in_speech or endpointer.silence_start_ms != check.silence_start_ms:
            return None
        return endpointer.end_turn(check.at_ms)


# ------------------------------------------------------------ the model


def last_samples(pcm16: bytes) -> npt.NDArray[np.int16]:
    """PCM16 mono 16 kHz -> its last 8 s (all of it if shorter), as samples."""
    return np.frombuffer(pcm16[max(0, len(pcm16) - WINDOW_SAMPLES * 2) :], dtype="<i2")


def window(pcm16: bytes) -> Float32Array:
    """PCM16 mono 16 kHz -> the model's input audio: its last 8 s, zero-padded at the front."""
    samples = last_samples(pcm16)
    out = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    if len(samples):
        out[-len(samples) :] = samples.astype(np.float32) / 32768.0
    return out


class _Features(Protocol):
    def compute_whisper_log_mel_features(
        self, audio: Float32Array, *, do_normalize: bool = True
    ) -> Float32Array: ...


def _load_features(path: Path) -> _Features:
    """pipecat's numpy-only Whisper log-mel extractor, loaded from its file alone."""
    spec = importlib.util.spec_from_file_location("antiphon_smart_turn_features", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the Smart Turn feature extractor from {path}")
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # The module is checked against the protocol by use: mypy cannot see its file.
    return cast(_Features, module)


class TurnModel(Protocol):
    """Smart Turn as the batcher calls it: `SmartTurn` on onnxruntime, or
    `TorchSmartTurn` (turn_torch.py) on a GPU."""

    def predict(self, clips: Sequence[bytes]) -> Float32Array:
        """Probability that each clip's turn is complete, in one model call.

        A clip is PCM16 mono 16 kHz, the utterance up to the moment asked
        about; the model hears its last 8 s (`WINDOW_SAMPLES`)."""
        ...


class SmartTurn:
    """One onnxruntime session of Smart Turn v3.2, shared by every session of a worker."""

    def __init__(self, onnx_path: Path, features_path: Path, threads: int = 1) -> None:
        self._features = _load_features(features_path)
        # Summed exactly on every x86 CPU: without VNNI its answers would be
        # another model's (exact_int8.py).
        self._session = exact_int8_session(onnx_path, threads)
        (inp,) = self._session.get_inputs()
        self._input = inp.name
        # v3.2's batch dimension is symbolic; a fixed one is run one window at a time.
        self.batched = not isinstance(inp.shape[0], int)

    def features(self, audio: Float32Array) -> Float32Array:
        """One 8 s window -> (80, 800) normalised log-mel features."""
        return self._features.compute_whisper_log_mel_features(audio, do_normalize=True)

    def predict(self, clips: Sequence[bytes]) -> Float32Array:
        """Probability that each clip's turn is complete, in one model call."""
        if not clips:
            return np.zeros(0, dtype=np.float32)
        feats = np.stack([self.features(window(c)) for c in clips])
        if self.batched:
            return self._run(feats)
        return np.concatenate([self._run(f[None]) for f in feats])

    def _run(self, feats: Float32Array) -> Float32Array:
        (probs,) = self._session.run(None, {self._input: feats})
        # The export ends in a sigmoid: these are probabilities, not logits.
        return np.asarray(probs, dtype=np.float32).reshape(-1)


class TurnBatcher:
    """Runs the clips of every session waiting for an answer in one model call.

    Sessions `submit` a clip; once the event loop has taken in what else
    arrived in the same turn, every waiting clip goes to the model in one
    call, off the event loop (on `executor`: a call takes tens of ms), which
    cuts each to its window there. Clips submitted while a call runs wait for
    the next one. Each answer goes to its callback on the event loop.
    """

    def __init__(
        self,
        model: TurnModel,
        *,
        executor: Executor | None = None,
        # The worker passes `turn_max_batch` (settings.py says why 8 on a CPU).
        max_batch: int = 8,
        observe_batch: Callable[[int], None] = lambda _size: None,
    ) -> None:
        self._model = model
        # One thread by default: the calls are batched, never run side by side.
        self._executor = executor or ThreadPoolExecutor(1, thread_name_prefix="turn")
        self._max_batch = max_batch
        self._observe_batch = observe_batch
        self._waiting: dict[object, tuple[bytes, Callable[[float], None]]] = {}
        self._running: dict[object, Callable[[float], None]] = {}
        # Set while no clip waits or runs.
        self._quiet = asyncio.Event()
        self._quiet.set()

    def submit(self, key: object, pcm16: bytes, on_probability: Callable[[float], None]) -> None:
        """Queue `key`'s clip (a newer one from the same key replaces it)."""
        self._waiting[key] = (pcm16, on_probability)
        if self._quiet.is_set():
            self._quiet.clear()
            asyncio.get_running_loop().call_soon(self._start)

    def discard(self, key: object) -> None:
        """A closed session: its clip is not run, or its answer not delivered."""
        self._waiting.pop(key, None)
        self._running.pop(key, None)

    async def idle(self) -> None:
        """Until every submitted clip was answered (or its session discarded)."""
        await self._quiet.wait()

    def _start(self) -> None:
        if not self._waiting:
            self._quiet.set()
            return
        keys = list(self._waiting)[: self._max_batch]
        clips = []
        for key in keys:
            pcm16, on_probability = self._waiting.pop(key)
            clips.append(pcm16)
            self._running[key] = on_probability
        self._observe_batch(len(keys))
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, self._model.predict, clips)
        future.add_done_callback(lambda f: self._finished(keys, f))

    def _finished(self, keys: list[object], future: asyncio.Future[Float32Array]) -> None:
        try:
            probs = [float(p) for p in future.result()]
        except (Exception, asyncio.CancelledError):
            log.exception("end-of-turn model failed")
            # Nobody is answered: each session ends its turn at the longest wait.
            probs = [0.0] * len(keys)
        for key, probability in zip(keys, probs, strict=True):
            on_probability = self._running.pop(key, None)
            if on_probability is None:
                continue
            try:
                on_probability(probability)
            except Exception:
                # One session's bug must not stall every other session's turns.
                log.exception("end-of-turn handler failed")
        self._start()
