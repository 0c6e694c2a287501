"""Silero VAD on onnxruntime, batched across sessions, and a pure endpointer.

One `SileroVad` (one InferenceSession) serves every session of a worker: each
session owns a `VadStream` holding its recurrent state, its 64-sample context
and the samples that do not yet fill a frame. `SileroVad.step` runs one frame
of many streams in one call, which is how a worker keeps VAD cost flat as
sessions grow; `VadBatcher` gathers the frames of all of a worker's sessions
into those calls. `VadStream.feed` is the one-session convenience path.

Times are on the stream's own audio clock: milliseconds of audio fed to this
stream since it was created, which is what OpenAI's `audio_start_ms` /
`audio_end_ms` count.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from antiphon.common import stage_audio

log = logging.getLogger(__name__)

SAMPLE_RATE = stage_audio.RATE
FRAME_SAMPLES = 512
# Silero v5 looks at the last 64 samples of the previous frame as well.
CONTEXT_SAMPLES = 64
FRAME_MS = FRAME_SAMPLES * 1000 // SAMPLE_RATE
_FRAME_BYTES = FRAME_SAMPLES * 2
_STATE_DIMS = (2, 128)
# Silero's own hysteresis: once in speech, only a clearly lower probability
# counts as silence, so a soft syllable does not start the silence timer.
_HYSTERESIS = 0.15

Float32Array = npt.NDArray[np.float32]


@dataclass(frozen=True)
class SpeechStarted:
    """Speech confirmed. `audio_start_ms` includes the prefix padding (OpenAI's meaning)."""

    audio_start_ms: int
    # Start of the first frame judged to be speech.
    onset_ms: int


@dataclass(frozen=True)
class SpeechStopped:
    """Silence confirmed. `audio_end_ms` includes the silence duration (OpenAI's meaning)."""

    audio_end_ms: int
    # End of the last frame judged to be speech.
    offset_ms: int


VadEvent = SpeechStarted | SpeechStopped


@dataclass(frozen=True)
class EndpointerConfig:
    """OpenAI `server_vad` knobs plus a minimum speech length against clicks."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    min_speech_ms: int = 100

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        for name in ("prefix_padding_ms", "silence_duration_ms", "min_speech_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")


class Endpointer:
    """Turns per-frame speech probabilities into start/stop events. Pure: no audio, no model.

    `semantic_vad` (turn.py) runs it with its longest wait as the silence
    duration and may end an utterance sooner with `end_turn`.
    """

    def __init__(self, config: EndpointerConfig | None = None, *, start_ms: int = 0) -> None:
        self.config = config or EndpointerConfig()
        self._now_ms = start_ms
        self._in_speech = False
        # Onset of a run of speech frames not yet long enough to count.
        self._candidate_ms: int | None = None
        # Start of the current silence inside speech, if any.
        self._silence_ms: int | None = None
        self._last_end_ms = 0

    @property
    def in_speech(self) -> bool:
        return self._in_speech

    @property
    def now_ms(self) -> int:
        """End of the last frame seen, on the stream clock."""
        return self._now_ms

    @property
    def silence_start_ms(self) -> int | None:
        """Start of the silence the current utterance is in, if it is in one."""
        return self._silence_ms if self._in_speech else None

    def reset(self) -> None:
        """Back to silence at the current time; the next onset is never padded before now."""
        self._in_speech = False
        self._candidate_ms = None
        self._silence_ms = None
        self._last_end_ms = self._now_ms

    def end_turn(self, at_ms: int | None = None) -> SpeechStopped | None:
        """End the utterance in the silence it is in, at `at_ms` (default: now).

        An end-of-turn model's call: `at_ms` is the end of the audio it judged,
        within this silence. None when there is nothing to end: not in
        speech, or speech is going on.
        """
        if not self._in_speech or self._silence_ms is None:
            return None
        offset = self._silence_ms
        end = self._now_ms if at_ms is None else min(max(at_ms, offset), self._now_ms)
        self._in_speech = False
        self._silence_ms = None
        self._last_end_ms = end
        return SpeechStopped(audio_end_ms=end, offset_ms=offset)

    def update(self, probability: float, frame_ms: int = FRAME_MS) -> VadEvent | None:
        """Advance by one frame of `frame_ms` with the given speech probability."""
        cfg = self.config
        start = self._now_ms
        self._now_ms = end = start + frame_ms
        if not self._in_speech:
            if probability < cfg.threshold:
                self._candidate_ms = None
                return None
            if self._candidate_ms is None:
                self._candidate_ms = start
            if end - self._candidate_ms < max(cfg.min_speech_ms, frame_ms):
                return None
            onset = self._candidate_ms
            self._candidate_ms = None
            self._in_speech = True
            self._silence_ms = None
            # Never reach back into the previous utterance's audio.
            audio_start = max(onset - cfg.prefix_padding_ms, self._last_end_ms, 0)
            return SpeechStarted(audio_start_ms=audio_start, onset_ms=onset)
        if probability >= cfg.threshold:
            self._silence_ms = None
            return None
        if probability >= max(cfg.threshold - _HYSTERESIS, 0.01):
            # Between the two thresholds: neither resumes speech nor starts silence.
            return None
        if self._silence_ms is None:
            self._silence_ms = start
        if end - self._silence_ms < cfg.silence_duration_ms:
            return None
        offset = self._silence_ms
        self._in_speech = False
        self._silence_ms = None
        self._last_end_ms = end
        return SpeechStopped(audio_end_ms=end, offset_ms=offset)


def _new_state() -> Float32Array:
    return np.zeros(_STATE_DIMS, dtype=np.float32)


def _new_context() -> Float32Array:
    return np.zeros(CONTEXT_SAMPLES, dtype=np.float32)


@dataclass(eq=False)
class VadStream:
    """One session's VAD: Silero's recurrent state, context, leftover audio and endpointer.

    `eq=False` keeps identity semantics: two sessions are never "the same stream".
    """

    vad: SileroVad
    endpointer: Endpointer = field(default_factory=Endpointer)
    state: Float32Array = field(default_factory=_new_state)
    context: Float32Array = field(default_factory=_new_context)
    _leftover: bytearray = field(default_factory=bytearray)
    _frames: deque[Float32Array] = field(default_factory=deque)

    @property
    def pending_frames(self) -> int:
        """Whole frames pushed but not yet run through the model."""
        return len(self._frames)

    def push(self, pcm16: bytes) -> None:
        """Queue PCM16 mono 16 kHz audio; whole 512-sample frames become pending."""
        self._leftover += pcm16
        whole = len(self._leftover) // _FRAME_BYTES * _FRAME_BYTES
        if not whole:
            return
        samples = np.frombuffer(bytes(self._leftover[:whole]), dtype="<i2")
        del self._leftover[:whole]
        scaled = samples.astype(np.float32) / 32768.0
        for frame in scaled.reshape(-1, FRAME_SAMPLES):
            self._frames.append(frame)

    def pop_frame(self) -> Float32Array:
        return self._frames.popleft()

    def feed(self, pcm16: bytes) -> list[VadEvent]:
        """Push audio and run every whole frame now (a batch of one per frame)."""
        self.push(pcm16)
        events: list[VadEvent] = []
        while self._frames:
            events.extend(self.vad.step([self])[0])
        return events

    def configure(self, config: EndpointerConfig) -> None:
        """New knobs from `session.update`; the audio clock and speech state carry on."""
        self.endpointer.config = config

    def clear(self) -> None:
        """Input buffer cleared: an utterance in progress ends without an event.

        Queued audio, model state and the clock carry on (dropping samples would
        shift every later event time), so only the endpointer starts over.
        """
        self.endpointer.reset()


def cpu_session(
    model: Path | bytes, threads: int, entries: Mapping[str, str] | None = None
) -> ort.InferenceSession:
    """An onnxruntime session on the CPU that stays on the threads it is given:
    a stage0 worker shares a small CPU among the VAD, Smart Turn, ASR and the LLM.
    `entries` are session config entries (exact_int8.py's)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    for key, value in (entries or {}).items():
        options.add_session_config_entry(key, value)
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])


class SileroVad:
    """One onnxruntime session of Silero VAD v5, shared by every stream of a worker."""

    def __init__(self, onnx_path: Path, threads: int = 1) -> None:
        self._session = cpu_session(onnx_path, threads)
        names = {i.name for i in self._session.get_inputs()}
        # The 16 kHz-only export has no `sr` input; the general one needs it.
        self._needs_sr = "sr" in names

    def stream(self, config: EndpointerConfig | None = None) -> VadStream:
        return VadStream(vad=self, endpointer=Endpointer(config))

    def infer(
        self, windows: Float32Array, state: Float32Array
    ) -> tuple[Float32Array, Float32Array]:
        """Raw batched call: windows (B, 64+512) and state (2, B, 128) -> probs (B,), state."""
        feeds: dict[str, npt.NDArray[np.generic]] = {"input": windows, "state": state}
        if self._needs_sr:
            feeds["sr"] = np.array(SAMPLE_RATE, dtype=np.int64)
        probs, new_state = self._session.run(None, feeds)
        return (
            np.asarray(probs, dtype=np.float32).reshape(-1),
            np.asarray(new_state, dtype=np.float32),
        )

    def step(self, streams: Sequence[VadStream]) -> list[list[VadEvent]]:
        """Run one pending frame of each stream in one model call; events per stream, in order.

        A stream may appear once per call: its next frame depends on this one's state.
        """
        if not streams:
            return []
        batch = self.take(streams)
        return self.advance(batch, *self.infer(batch.windows, batch.state))

    def take(self, streams: Sequence[VadStream]) -> VadBatch:
        """The next frame of each stream, as one model call's inputs (taken off the streams)."""
        if len({id(s) for s in streams}) != len(streams):
            raise ValueError("a stream may appear only once per batch")
        if any(s.pending_frames == 0 for s in streams):
            raise ValueError("every stream in a batch needs a pending frame")
        frames = [s.pop_frame() for s in streams]
        windows = np.stack(
            [np.concatenate((s.context, f)) for s, f in zip(streams, frames, strict=True)]
        )
        state = np.stack([s.state for s in streams], axis=1)
        return VadBatch(list(streams), frames, windows, state)

    def advance(
        self, batch: VadBatch, probs: Float32Array, new_state: Float32Array
    ) -> list[list[VadEvent]]:
        """The call's results into each stream's state and endpointer; events per stream."""
        out: list[list[VadEvent]] = []
        for i, (s, f) in enumerate(zip(batch.streams, batch.frames, strict=True)):
            s.state = np.ascontiguousarray(new_state[:, i, :])
            s.context = f[-CONTEXT_SAMPLES:].copy()
            event = s.endpointer.update(float(probs[i]))
            out.append([event] if event is not None else [])
        return out


@dataclass(eq=False)
class VadBatch:
    """One model call's inputs: a frame of each stream, with its context and state."""

    streams: list[VadStream]
    frames: list[Float32Array]
    windows: Float32Array
    state: Float32Array


class VadBatcher:
    """Runs the queued frames of every stream of a worker in shared model calls.

    Sessions `submit` their stream after pushing audio; the batcher runs once
    the event loop has taken in what else arrived in the same turn, so audio
    from many sessions lands in one batch. Each stream's events go to its
    callback, on the event loop, in order, once its queued frames are all run.

    A call of `offload_at` streams or more runs on `executor`, off the event
    loop: sessions that speak in step (a burst of 128) make calls that hold a
    core for milliseconds, six per 200 ms chunk, and every other request on
    the loop waited behind them. Smaller calls run inline: live callers'
    chunks arrive apart, mostly one stream a call, and a thread hand-off per
    call of ~0.1 ms doubled the VAD's CPU (bench/vad_loop.py, in git history). Frames pushed
    while a call runs go in the next one.
    """

    def __init__(
        self,
        vad: SileroVad,
        *,
        executor: Executor | None = None,
        max_batch: int = 256,
        offload_at: int = 16,
        observe_batch: Callable[[int], None] = lambda _size: None,
    ) -> None:
        self._vad = vad
        # One thread: a stream's frames run one call after another anyway.
        self._executor = executor or ThreadPoolExecutor(1, thread_name_prefix="vad")
        self._max_batch = max_batch
        self._offload_at = offload_at
        self._observe_batch = observe_batch
        self._waiting: dict[VadStream, tuple[Callable[[list[VadEvent]], None], list[VadEvent]]] = {}
        self._task: asyncio.Task[None] | None = None

    def submit(self, stream: VadStream, on_events: Callable[[list[VadEvent]], None]) -> None:
        if stream not in self._waiting:
            self._waiting[stream] = (on_events, [])
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def discard(self, stream: VadStream) -> None:
        """A closed session: its queued frames are never run, nor its events delivered."""
        self._waiting.pop(stream, None)

    async def idle(self) -> None:
        """Until every submitted frame has run and its events were delivered."""
        while self._task is not None:
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            # What else arrives in this turn of the loop joins the first call.
            await asyncio.sleep(0)
            while self._waiting:
                ready = [s for s in self._waiting if s.pending_frames][: self._max_batch]
                if ready:
                    self._observe_batch(len(ready))
                    batch = self._vad.take(ready)
                    try:
                        if len(ready) >= self._offload_at:
                            probs, state = await loop.run_in_executor(
                                self._executor, self._vad.infer, batch.windows, batch.state
                            )
                        else:
                            probs, state = self._vad.infer(batch.windows, batch.state)
                    except Exception:
                        # The frames are lost, not the streams: the next call
                        # goes on from each stream's last state.
                        log.exception("VAD model call failed")
                        continue
                    for stream, events in zip(
                        ready, self._vad.advance(batch, probs, state), strict=True
                    ):
                        if stream in self._waiting:
                            self._waiting[stream][1].extend(events)
                self._deliver()
        finally:
            self._task = None

    def _deliver(self) -> None:
        """Events to each stream whose queued frames have all run."""
        for stream in [s for s in self._waiting if not s.pending_frames]:
            on_events, events = self._waiting.pop(stream)
            try:
                on_events(events)
            except Exception:
                # One session's bug must not stall every other session's VAD.
                log.exception("VAD event handler failed")
