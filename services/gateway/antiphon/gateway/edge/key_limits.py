"""Per-key limits: sessions open at once, and opens per second (a token bucket).

Counted per gateway process: N replicas admit up to N times each limit for
one key. A session opened with a client secret counts against the key that
minted it. The state is one entry per configured key that has opened
something, so it is bounded by the key file, never by what clients send.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Refused = Literal["key_session_limit", "key_rate_limit"]


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class Lease:
    """One admitted session of one key; `release` once it ends (idempotent)."""

    def __init__(self, limits: KeyLimits | None, key_id: str) -> None:
        self._limits = limits
        self._key_id = key_id

    def release(self) -> None:
        if self._limits is not None:
            self._limits._release(self._key_id)
            self._limits = None


class LimitExceeded(Exception):
    def __init__(self, code: Refused, message: str) -> None:
        super().__init__(message)
        self.code: Refused = code
        self.message = message


class KeyLimits:
    """`max_sessions`, `opens_per_s`: 0 = no such limit. `burst`: the bucket's
    size (0 = one second's worth, at least one open)."""

    def __init__(
        self,
        max_sessions: int = 0,
        opens_per_s: float = 0.0,
        burst: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_sessions = max_sessions
        self._rate = opens_per_s
        self._burst = float(burst) if burst > 0 else max(1.0, opens_per_s)
        self._clock = clock
        self._active: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}

    def active(self, key_id: str) -> int:
        return self._active.get(key_id, 0)

    def admit(self, key_id: str) -> Lease:
        """A lease for one more session of `key_id`; raises LimitExceeded.
        A refusal for concurrency spends no token: it opened nothing."""
        if self._max_sessions and self.active(key_id) >= self._max_sessions:
            raise LimitExceeded(
                "key_session_limit",
                f"this key already has {self._max_sessions} sessions open on this gateway",
            )
        if self._rate > 0:
            now = self._clock()
            bucket = self._buckets.get(key_id)
            if bucket is None:
                bucket = self._buckets[key_id] = _Bucket(self._burst, now)
            bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.stamp) * self._rate)
            bucket.stamp = now
            if bucket.tokens < 1.0:
                raise LimitExceeded(
                    "key_rate_limit",
                    f"this key may open {self._rate:g} sessions per second on this gateway",
                )
            bucket.tokens -= 1.0
        self._active[key_id] = self.active(key_id) + 1
        return Lease(self, key_id)

    def _release(self, key_id: str) -> None:
        left = self.active(key_id) - 1
        if left > 0:
            self._active[key_id] = left
        else:
            self._active.pop(key_id, None)
