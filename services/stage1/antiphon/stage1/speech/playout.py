"""When each response's audio runs out at the listener, on stage1's clock.

A client plays audio as it arrives: each chunk after the one before it, or
at once if that one has already ended. So stage1 knows, per response, when
the listener will have heard everything sent. Shortly before the first
phrase runs out, with no clause of the response waiting to be spoken, the
words the LLM has already written are spoken without waiting for the
clause's end (synthesis.py): the first join may fall mid-clause, but the
listener hears no silence after the first words. Only there: later, an LLM
writing at the pace of speech would make every join a word, and speech
broken word by word sounds worse than a pause between clauses.
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
        # Phrases of each response sent so far.
        self._phrases: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def sent(self, response_id: str, duration_s: float) -> None:
        """Audio of `response_id` went out: it plays after what was sent before."""
        now = time.perf_counter()
        self._ends[response_id] = max(self._ends.get(response_id, now), now) + duration_s
        self._phrases[response_id] = self._phrases.get(response_id, 0) + 1
        if self._phrases[response_id] == 1:
            self._arm(response_id)

    def running_out(self, response_id: str) -> bool:
        """Whether the listener is about to run out of this response's first
        phrase (False before it, and once the first join is made)."""
        end = self._ends.get(response_id)
        return (
            self._guard_s > 0
            and end is not None
            and self._phrases.get(response_id) == 1
            and end - time.perf_counter() <= self._guard_s
        )

    def forget(self, response_id: str) -> None:
        self._ends.pop(response_id, None)
        self._phrases.pop(response_id, None)
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
