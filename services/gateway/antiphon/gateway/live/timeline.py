"""One GPT-Live session's timeline: the input clock, and the output track it paces.

GPT-Live's timeline is clocked by the input audio: it advances only while
the client's audio arrives, and the output is one continuous track on it,
the model's speech and exact zeros between. The session tier knows none
of this (it speaks in responses, as to every dialect); this object turns
its audio deltas into that track, with no I/O:

- `heard(samples)`: the client's audio advanced the clock (muted audio too:
  the model heard silence for it). Output is released up to the clock, in
  `chunk_ms` deltas, so it stalls when the input stops and resumes with it.
- `spoke(pcm16)` / `said(text)`: a frame of the model's audio, then the
  text it speaks. Speech waits in a playout queue: it starts playing once
  `prebuffer_ms` of it is queued (or the utterance ended, `quiet`), so a
  frame that arrives a little late does not leave a hole in the middle of
  a word; a queue that runs dry mid-utterance is filled with zeros and
  fills again first. A queue past `max_queue_ms` (the client stopped its
  input while the model went on talking) loses its oldest speech.
- Each frame's text goes out as `session.output_transcript.delta` with the
  span its audio took on the track (`start_ms`, `end_ms`: timeline ms), once
  all that audio went out: the text never runs ahead of the audio it names.
- `session.usage.updated` every `usage_every_ms` of timeline: cumulative
  whole seconds.

The track is PCM16 at `TRACK_RATE` in here; `TrackFormat` gives the client
its format.
"""

from __future__ import annotations

import base64
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from antiphon.common.ids import new_id
from antiphon.gateway.live.track_format import TRACK_RATE

Json = dict[str, Any]

# OpenAI's deltas are about 100 ms each.
CHUNK_MS = 100
# Three of the Moshi architecture's 80 ms frames: more than one append's
# worth of arrival jitter (clients send 100-200 ms at a time).
PREBUFFER_MS = 240
# Speech the model made while the client sent nothing (the duplex backends'
# own jitter bound is 2 s); older speech than this is dropped.
MAX_QUEUE_MS = 5000
# OpenAI reports usage about every 15 s.
USAGE_EVERY_MS = 15_000
_SAMPLES_PER_MS = TRACK_RATE // 1000


@dataclass
class _Speech:
    """One frame of the model's speech, and where it landed on the track."""

    pcm16: bytes
    text: str = ""
    start: int | None = None  # track sample of its first, once placed
    played: int = 0  # bytes of it on the track so far
    told: bool = False  # its transcript delta went out

    @property
    def samples(self) -> int:
        return len(self.pcm16) // 2


class Timeline:
    def __init__(
        self,
        input_rate: int,
        convert: Callable[[bytes], bytes],
        *,
        chunk_ms: int = CHUNK_MS,
        prebuffer_ms: int = PREBUFFER_MS,
        max_queue_ms: int = MAX_QUEUE_MS,
        usage_every_ms: int = USAGE_EVERY_MS,
    ) -> None:
        self.input_rate = input_rate
        # The track's chunk (PCM16 at TRACK_RATE) in the client's format.
        self.convert = convert
        self.chunk_ms = chunk_ms
        self.prebuffer_ms = prebuffer_ms
        self.max_queue_ms = max_queue_ms
        self.usage_every_ms = usage_every_ms
        self._heard = 0  # input samples at `input_rate`
        self._out = 0  # track samples sent
        self._queue: deque[_Speech] = deque()
        self._last: _Speech | None = None  # the frame a transcript delta belongs to
        self._placed: deque[_Speech] = deque()  # on the track, not yet all of it
        self._playing = False
        self._ending = False  # the utterance ended: play what is queued out
        self._usage_told = 0  # usage reports so far

    # ------------------------------------------------------------ clock
    @property
    def now_ms(self) -> int:
        """The timeline: milliseconds of input audio heard."""
        return self._heard * 1000 // self.input_rate

    @property
    def seconds(self) -> float:
        """Usage: whole seconds of timeline."""
        return float(self.now_ms // 1000)

    @property
    def played_ms(self) -> int:
        """Where the output track is: milliseconds of it sent."""
        return self._out // _SAMPLES_PER_MS

    def usage(self) -> Json:
        return {"seconds": self.seconds}

    def heard(self, samples: int) -> list[Json]:
        """The client's audio advanced the clock by `samples` (at `input_rate`)."""
        self._heard += samples
        frames = self._release()
        while self.now_ms // self.usage_every_ms > self._usage_told:
            self._usage_told += 1
            frames.append(
                {
                    "type": "session.usage.updated",
                    "event_id": new_id("event"),
                    "usage": self.usage(),
                }
            )
        return frames

    # ----------------------------------------------------------- speech
    def spoke(self, pcm16: bytes) -> list[Json]:
        """A frame of the model's audio (PCM16 at TRACK_RATE)."""
        if not pcm16:
            return []
        self._last = _Speech(pcm16)
        self._queue.append(self._last)
        while self._queued() > self.max_queue_ms * _SAMPLES_PER_MS and len(self._queue) > 1:
            self._queue.popleft()
        return self._release()

    def said(self, text: str) -> list[Json]:
        """The text of the frame last `spoke`; told once all its audio went out."""
        speech = self._last
        if speech is None:
            # Text with no audio of its own: an instant on the track.
            return [self._transcript(text, self._out, self._out)]
        speech.text += text
        if speech.start is None or speech.start + speech.samples > self._out:
            return []  # told once all its audio is on the track
        return self._tell(speech)

    def quiet(self) -> list[Json]:
        """The model's utterance ended: what is queued plays without the prebuffer."""
        self._ending = bool(self._queue)
        return self._release()

    # ------------------------------------------------------------ track
    def _queued(self) -> int:
        return sum(s.samples - s.played // 2 for s in self._queue)

    def _release(self) -> list[Json]:
        frames: list[Json] = []
        chunk = self.chunk_ms * _SAMPLES_PER_MS
        available = self._heard * TRACK_RATE // self.input_rate
        while self._out + chunk <= available:
            if not self._playing:
                ready = self._queued() >= self.prebuffer_ms * _SAMPLES_PER_MS
                self._playing = bool(self._queue) and (ready or self._ending)
            pcm = bytearray()
            while self._playing and self._queue and len(pcm) < chunk * 2:
                speech = self._queue[0]
                if speech.start is None:
                    speech.start = self._out + len(pcm) // 2
                    self._placed.append(speech)
                take = speech.pcm16[speech.played : speech.played + chunk * 2 - len(pcm)]
                pcm += take
                speech.played += len(take)
                if speech.played >= len(speech.pcm16):
                    self._queue.popleft()
            if not self._queue:
                # Ran dry (or done): zeros, and the next speech buffers first.
                self._playing = self._ending = False
            pcm += bytes(chunk * 2 - len(pcm))
            self._out += chunk
            frames.append(
                {
                    "type": "session.output_audio.delta",
                    "delta": base64.b64encode(self.convert(bytes(pcm))).decode(),
                }
            )
            while self._placed and self._ends(self._placed[0]) <= self._out:
                frames += self._tell(self._placed.popleft())
        return frames

    @staticmethod
    def _ends(speech: _Speech) -> int:
        assert speech.start is not None  # placed
        return speech.start + speech.samples

    def _tell(self, speech: _Speech) -> list[Json]:
        if not speech.text or speech.told or speech.start is None:
            return []
        speech.told = True
        return [self._transcript(speech.text, speech.start, speech.start + speech.samples)]

    def _transcript(self, text: str, start: int, end: int) -> Json:
        return {
            "type": "session.output_transcript.delta",
            "event_id": new_id("event"),
            "delta": text,
            "start_ms": start // _SAMPLES_PER_MS,
            "end_ms": -(-end // _SAMPLES_PER_MS),
        }
