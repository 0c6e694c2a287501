"""When a session ends by time alone: its age, and its idle lease.

The age is the session's, not a socket's: a session outlives its sockets
(resumes, fail-over), so it is counted from its open on the wall clock
every replica shares (in Redis). The idle lease runs from the last command
or attach this replica saw.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Deadlines:
    def __init__(
        self,
        created_ms: int,
        *,
        max_duration_s: float,
        idle_ttl_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._created_ms = created_ms  # 0: unknown, no age limit
        self._max_duration_s = max_duration_s  # 0: no limit
        self._idle_ttl_s = idle_ttl_s  # 0: no limit
        self._monotonic = monotonic
        self._last_activity = monotonic()

    def touch(self) -> None:
        """The client did something: the idle lease starts again."""
        self._last_activity = self._monotonic()

    @property
    def expires_at_s(self) -> int:
        """When the session ends by age, in Unix seconds (0: no age limit)."""
        if not (self._max_duration_s and self._created_ms):
            return 0
        return int((self._created_ms + self._max_duration_s * 1000) // 1000)

    def passed(self) -> str | None:
        """The reason the session expires now, if one of its deadlines passed."""
        limit_s = self._max_duration_s
        if limit_s and self._created_ms and time.time() * 1000 - self._created_ms > limit_s * 1000:
            return "max_duration_expired"
        if self._idle_ttl_s and self._monotonic() - self._last_activity > self._idle_ttl_s:
            return "idle_ttl_expired"
        return None
