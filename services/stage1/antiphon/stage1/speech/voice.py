"""What a text-in backend's voice implements: blocking synthesis at a fixed rate.

The `piper` and `synthetic` backends each provide a `Voice`; the rest of the
pipeline (clauses, scheduling, playout, one session's synthesis) is theirs in
common (this package).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class SpeechChunk:
    """Audio for `text`, and where in it each word ends.

    `marks` are (chars of `text` spoken, audio ms at which they end), both
    relative to this chunk, increasing; the last is (len(text), duration_ms).
    """

    pcm16: bytes
    text: str
    duration_ms: int
    marks: list[tuple[int, int]] = field(default_factory=list)


class Voice(Protocol):
    """What a text-in stage1 backend provides: blocking synthesis at a fixed output rate."""

    out_rate: int

    def synthesize(self, text: str, speed: float = 1.0) -> Iterator[SpeechChunk]: ...
