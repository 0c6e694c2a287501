"""When each response's audio runs out at the listener, on stage1's clock.

A client plays audio as it arrives: each chunk after the one before it, or
at once if that one has already ended. So stage1 knows, per response, when
the listener will have heard everything sent. Shortly before that moment,
with no clause of the response waiting to be spoken, the words the LLM has
already written are spoken without waiting for the clause's end
(synthesis.py): a join may then fall mid-clause, but the listener hears no
silence while the LLM writes at about the pace of speech.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Playout:
    def __init__(self, *, guard_s: float, on_running_out: Callable[[str], None]) -> None:
        # How long before the audio runs out the words written are spoken (0: never).
        self._guard_s = guard_s
        self._on_running_out = on_running_out
        self._ends: dict[str, float] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def sent(self, response_id: str, duration_s: float) -> None:
        """Audio of `response_id` went out: it plays after what was sent before."""
        now = time.perf_counter()
        self._ends[response_id] = max(self._ends.get(response_id, now), now) + duration_s
        self._arm(response_id)

    def running_out(self, response_id: str) -> bool:
        """Whether the listener is about to run out of this response's audio
        (False before its first audio: nothing plays yet)."""
        end = self._ends.get(response_id)
        return self._guard_s > 0 and end is not None and end - time.perf_counter() <= self._guard_s

    def forget(self, response_id: str) -> None:
        self._ends.pop(response_id, None)
        timer = self._timers.pop(response_id, None)
        if timer is not None:
            timer.cancel()

    def clear(self) -> None:
        for response_id in list(self._ends):
            self.forget(response_id)

    def _arm(self, response_id: str) -> None:
        if self._guard_s <= 0:
            return
        old = self._timers.pop(response_id, None)
        if old is not None:
            old.cancel()
        delay = self._ends[response_id] - self._guard_s - time.perf_counter()
        self._timers[response_id] = asyncio.get_running_loop().call_later(
            max(0.0, delay), self._on_running_out, response_id
        )
