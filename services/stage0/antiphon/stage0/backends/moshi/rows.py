"""One session's row of the duplex batch: its audio waiting for the clock, and
whether the model is speaking to it.

Plain objects, no torch and no I/O: the lockstep (lockstep.py) takes a
frame from each row per step and tells it what the model said; the session
(session.py) feeds it requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from antiphon.common.moshi_checkpoint import FRAME_MS, FRAME_SAMPLES, SAMPLE_RATE
from antiphon.stage0.backends.moshi.context import ContextQueue
from antiphon.v1 import stage_pb2 as pb

if TYPE_CHECKING:
    from antiphon.stage0.backends.moshi.prompt import ForcedFrame

FRAME_BYTES = FRAME_SAMPLES * 2  # PCM16 mono
BYTES_PER_MS = SAMPLE_RATE * 2 // 1000  # 48 at 24 kHz


class JitterBuffer:
    """PCM16 waiting for its step, at most `limit_ms`: beyond it the oldest goes
    (a sender ahead of real time would otherwise grow it without end). Frames
    are 80 ms at `rate` (Mimi's 24 kHz unless a model hears another)."""

    def __init__(self, limit_ms: int, rate: int = SAMPLE_RATE) -> None:
        self._bytes_per_ms = rate * 2 // 1000
        self._frame_bytes = rate * FRAME_MS // 1000 * 2
        # Whole frames only, so that a drop never shifts the frame grid.
        frame = self._frame_bytes
        self._limit = max(frame, limit_ms * self._bytes_per_ms // frame * frame)
        self._pcm = bytearray()

    def push(self, pcm16: bytes) -> int:
        """Buffer `pcm16`; the milliseconds of older audio dropped to make room."""
        self._pcm += pcm16
        over = len(self._pcm) - self._limit
        if over <= 0:
            return 0
        # Drop whole samples, and a lone odd byte never counts as audio.
        over += over % 2
        del self._pcm[:over]
        return over // self._bytes_per_ms

    def take_frame(self) -> bytes | None:
        """One frame's audio, or None while less than a frame has come (the
        partial frame stays for the next step)."""
        if len(self._pcm) < self._frame_bytes:
            return None
        frame = bytes(self._pcm[: self._frame_bytes])
        del self._pcm[: self._frame_bytes]
        return frame

    def clear(self) -> None:
        self._pcm.clear()

    @property
    def buffered_ms(self) -> int:
        return len(self._pcm) // self._bytes_per_ms


class AudioBuffer(Protocol):
    """A row's audio waiting for its step: a `JitterBuffer` in the worker's own
    process, shared memory from a front end's (shared_rows.AudioRing)."""

    def push(self, pcm16: bytes) -> int: ...

    def take_frame(self) -> bytes | None: ...

    def clear(self) -> None: ...

    @property
    def buffered_ms(self) -> int: ...


class Speaking:
    """Stage0's listen/speak decision from the model's text: SPEAK from its first
    word, LISTEN once it has said none for `quiet_frames` frames. A cancelled
    answer is muted (LISTEN) until the model has gone quiet that long."""

    def __init__(self, quiet_frames: int) -> None:
        self.quiet_frames = quiet_frames
        # Frames since the last word; a new row has been quiet "forever".
        self._quiet = quiet_frames
        self._speaking = False
        self._muted = False

    def observe(self, word: bool) -> pb.Decision:
        """The decision for a frame whose text token is (not) a word."""
        self._quiet = 0 if word else self._quiet + 1
        gone_quiet = self._quiet >= self.quiet_frames
        if gone_quiet:
            self._muted = False
        if word:
            self._speaking = True
        elif gone_quiet:
            self._speaking = False
        return pb.DECISION_SPEAK if self._speaking and not self._muted else pb.DECISION_LISTEN

    def mute(self) -> None:
        """The answer was cancelled: what the model still says of it is not spoken.
        A model already quiet has nothing left of it to mute."""
        if self._quiet < self.quiet_frames:
            self._muted = True
            self._speaking = False

    @property
    def muted(self) -> bool:
        return self._muted


class Row:
    """A session's place in the batch while it is bound: what the lockstep reads
    and writes for it. `emit` reports its frames (on the event loop)."""

    def __init__(
        self,
        index: int,
        emit: Callable[[pb.Stage0Event], None],
        *,
        jitter_ms: int,
        quiet_frames: int,
        context: Callable[[], ContextQueue],
        session_id: str = "",
        audio: AudioBuffer | None = None,
        rate: int = SAMPLE_RATE,
    ) -> None:
        self.index = index
        self.emit = emit
        self.session_id = session_id
        self.audio: AudioBuffer = audio or JitterBuffer(jitter_ms, rate)
        # PCM16 bytes a millisecond of its audio takes (Transcript.audio_ms).
        self.bytes_per_ms = rate * 2 // 1000
        self.speaking = Speaking(quiet_frames)
        # The newest epoch the session sent: frames are stamped with it.
        self.epoch = 0
        # Frames emitted so far (ModelFrame.index).
        self.frames = 0
        # Audio received since the last commit (Transcript.audio_ms).
        self.uncommitted_bytes = 0
        # The prompt's frames still to step through, forced, before the call
        # (prompt.py); what the session says meanwhile is not heard.
        self.prefill: deque[ForcedFrame] = deque()
        # Steps left whose output is the prompt's, not the call's: not reported.
        self.discard = 0
        # Text to force into the model's stream (context.py), and the frame
        # whose text the row's next step (after its prompt) makes.
        self._new_context = context
        self.context = context()
        self.made = 0

    def restart(self) -> None:
        """A new model context for the same session: it starts quiet, and
        what waited to be heard was said to the old one."""
        self.speaking = Speaking(self.speaking.quiet_frames)
        self.audio.clear()
        # A new queue, not a cleared one: a step under way settles the old.
        self.context = self._new_context()

    def frame(
        self, text: str, codes: list[int], *, word: bool, late: bool, tokens: Sequence[int] = ()
    ) -> None:
        """Report what the model said in this row's newest step (`tokens`: its
        text token ids, for a stage1 that speaks from them)."""
        decision = self.speaking.observe(word)
        self.emit(
            pb.Stage0Event(
                frame=pb.ModelFrame(
                    epoch=self.epoch,
                    index=self.frames,
                    text=text,
                    codes=codes,
                    tokens=tokens,
                    decision=decision,
                    late=late,
                )
            )
        )
        self.frames += 1
