"""Where one socket's session stream is: streaming, failing over, saying goodbye.

`Streaming`: a stream is up (or the first is opening). `FailingOver`: the
stream was lost; each new stream resumes the session, backing off, until
the deadline set by the first loss, past which the session is unavailable;
a stream the session answers on is `Streaming` again, and a later loss is a
new fail-over with a deadline of its own. `SayingGoodbye`: the connection
said its last command; a stream the session ends now is the end (not a
draining replica), and one lost takes the fail-over along (`failing_over`),
the goodbye said again on the next.

A move not in `TRANSITIONS` is a bug of the gateway, so it raises.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from antiphon.v1 import session_pb2 as spb


@dataclass(frozen=True)
class Retry:
    """How long a lost stream is tried again, and how often: from the first
    loss of an attachment until `deadline_s`, backing off exponentially."""

    deadline_s: float
    first_backoff_s: float = 0.1
    max_backoff_s: float = 1.0


@dataclass(frozen=True)
class Streaming:
    pass


@dataclass(frozen=True)
class FailingOver:
    """Past `deadline` (loop time) no replica took the session back in time;
    `backoff`: the wait before the next stream."""

    deadline: float
    backoff: float


@dataclass(frozen=True)
class SayingGoodbye:
    goodbye: spb.ClientCommand
    failing_over: FailingOver | None = None


State = Streaming | FailingOver | SayingGoodbye

TRANSITIONS: dict[type[State], frozenset[type[State]]] = {
    Streaming: frozenset({FailingOver, SayingGoodbye}),
    # Another stream (a longer backoff), or one the session answered on.
    FailingOver: frozenset({FailingOver, Streaming, SayingGoodbye}),
    # Saying goodbye is the stream's last phase: it only loses or finds a stream.
    SayingGoodbye: frozenset({SayingGoodbye}),
}


class IllegalTransition(RuntimeError):
    """A stream was moved where fail-over does not go: a bug of the gateway."""


class FailOverState:
    """The one writer of a socket's fail-over state."""

    def __init__(self, retry: Retry) -> None:
        self._retry = retry
        self._state: State = Streaming()

    @property
    def state(self) -> State:
        return self._state

    @property
    def failing_over(self) -> FailingOver | None:
        s = self._state
        if isinstance(s, SayingGoodbye):
            return s.failing_over
        return s if isinstance(s, FailingOver) else None

    @property
    def goodbye(self) -> spb.ClientCommand | None:
        s = self._state
        return s.goodbye if isinstance(s, SayingGoodbye) else None

    def say_goodbye(self, goodbye: spb.ClientCommand) -> None:
        self.move(SayingGoodbye(goodbye, self.failing_over))

    def answered(self) -> None:
        """The session took this socket back on the last stream."""
        if self.failing_over is None:
            return
        s = self._state
        self.move(replace(s, failing_over=None) if isinstance(s, SayingGoodbye) else Streaming())

    def lost(self, now: float) -> FailingOver:
        """The stream is gone: the fail-over this is (the first loss sets its
        deadline), with the backoff before the next stream."""
        was = self.failing_over
        if was is None:
            now_failing = FailingOver(now + self._retry.deadline_s, self._retry.first_backoff_s)
        else:
            backoff = min(was.backoff * 2, self._retry.max_backoff_s)
            now_failing = FailingOver(was.deadline, backoff)
        s = self._state
        self.move(
            replace(s, failing_over=now_failing) if isinstance(s, SayingGoodbye) else now_failing
        )
        return now_failing

    def move(self, new: State) -> None:
        """Any move goes through here; one not in `TRANSITIONS` raises."""
        if type(new) not in TRANSITIONS[type(self._state)]:
            raise IllegalTransition(f"{type(self._state).__name__} -> {type(new).__name__}")
        self._state = new
