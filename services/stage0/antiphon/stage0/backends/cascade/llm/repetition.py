"""The loop stop: a response that has started repeating itself is ended, not run to its limit.

Small models under a long or odd prompt can fall into a loop (a sentence, a
phrase or one token, again and again) that only `max_tokens` would end: half
a minute of speech nobody wants. vLLM's repetition penalty makes a loop less
likely; this guard ends the one that happens anyway, as soon as an n-gram of
the output's tokens has been produced `repeats` times. A loop of any period
repeats all of its n-grams, so one rule catches a repeated sentence (period >=
n) and a stutter (period < n: its n-grams recur every period).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


class LoopGuard:
    """Fed a response's tokens as they come; says when the output is looping."""

    def __init__(self, ngram: int, repeats: int) -> None:
        """`ngram` 0 turns the guard off; `repeats` (>= 2) occurrences of one n-gram is a loop."""
        if ngram < 0 or repeats < 2:
            raise ValueError("ngram must be >= 0 and repeats >= 2")
        self._n = ngram
        self._repeats = repeats
        self._tail: list[int] = []
        self._seen: Counter[tuple[int, ...]] = Counter()
        self.looping = False

    def feed(self, token_ids: Iterable[int]) -> bool:
        """Take the next tokens; True once the output has looped (and from then on)."""
        if not self._n:
            return False
        for token in token_ids:
            self._tail.append(token)
            if len(self._tail) < self._n:
                continue
            gram = tuple(self._tail[-self._n :])
            del self._tail[0]
            self._seen[gram] += 1
            if self._seen[gram] >= self._repeats:
                self.looping = True
        return self.looping
