"""The fail-over part: a socket's session stream survives the loss of its replica.

The far side is faked: each replica's `Connect` stream follows a plan
(serve the journal up to a seq and then drop, end or close; refuse; be
unreachable), and a resume replays the journal after the cursor it is
given, as the session service does. So a wrong cursor shows up as an event
delivered twice or one skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

import grpc
import pytest
from prometheus_client import CollectorRegistry

from antiphon.gateway.connection.client_close import client_gone
from antiphon.gateway.connection.failover import FailOver, SessionCall, SessionUnavailable
from antiphon.gateway.connection.failover_state import (
    TRANSITIONS,
    FailingOver,
    FailOverState,
    IllegalTransition,
    Retry,
    SayingGoodbye,
    Streaming,
)
from antiphon.gateway.metrics import GatewayMetrics
from antiphon.v1 import session_pb2 as spb

RETRY = Retry(deadline_s=0.05, first_backoff_s=0.001, max_backoff_s=0.004)
OPEN = spb.ClientCommand(client_type="session.update", open=spb.OpenSession())
GOODBYE = client_gone(1006)


def lost() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, details="replica gone")


def journal(seq: int) -> spb.ServerEvent:
    """The session's journal: `session.created` first, then text deltas."""
    if seq == 1:
        state = spb.SessionState(session_id="sess", incarnation=1, resume_token="tok-1")
        return spb.ServerEvent(seq=1, event_id="ev-1", session_created=state)
    return spb.ServerEvent(seq=seq, event_id=f"ev-{seq}", text_delta=spb.TextDelta(delta=str(seq)))


@dataclass(frozen=True)
class Serve:
    """Answer the first command, send the journal up to `upto`, then: drop the
    stream, end it (a draining replica), or close the session (terminal)."""

    upto: int
    then: Literal["drop", "end", "close"]
    # The stream is lost on the n-th command after the first (0: never).
    drop_on_command: int = 0
    # Before `then`: wait for the goodbye, or for this event.
    until_goodbye: bool = False
    until: asyncio.Event | None = None


@dataclass(frozen=True)
class Refuse:
    type: str


class Down:
    """The replica is unreachable: the stream fails at once."""


Plan = Serve | Refuse | Down


class FakeCall:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.written: list[spb.ClientCommand] = []
        self.half_closed = False
        self._lost = False
        self._heard = asyncio.Event()

    async def write(self, request: spb.ClientCommand) -> None:
        if self._lost:
            raise lost()
        if isinstance(self.plan, Down):
            self.written.append(request)  # what it was asked, unheard
            self._heard.set()
            raise lost()
        plan = self.plan
        if isinstance(plan, Serve) and plan.drop_on_command == len(self.written) > 0:
            self._lost = True
            self._heard.set()
            raise lost()
        self.written.append(request)
        self._heard.set()

    async def done_writing(self) -> None:
        self.half_closed = True
        self._heard.set()

    def __aiter__(self) -> AsyncIterator[spb.ServerEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[spb.ServerEvent]:
        while not self.written:
            await self._heard.wait()
            self._heard.clear()
        if isinstance(self.plan, Down):
            raise lost()
        if isinstance(self.plan, Refuse):
            error = spb.ErrorEvent(type=self.plan.type, code="refused", message="no")
            yield spb.ServerEvent(seq=0, event_id="ev-refused", error=error)
            return
        first = self.written[0]
        after = 0
        if first.WhichOneof("kind") == "resume":
            after = first.resume.last_received_seq
            resumed = spb.SessionResumed(session_id="sess", incarnation=1, resume_token="tok-2")
            yield spb.ServerEvent(seq=after, event_id="ev-resumed", session_resumed=resumed)
        for seq in range(after + 1, self.plan.upto + 1):
            yield journal(seq)
        if self.plan.until_goodbye:
            while not self._lost and not any(c.HasField("client_gone") for c in self.written):
                await self._heard.wait()
                self._heard.clear()
        if self.plan.until is not None:
            await self.plan.until.wait()
        while self.plan.drop_on_command and not self._lost:
            await self._heard.wait()
            self._heard.clear()
        if self._lost or self.plan.then == "drop":
            self._lost = True
            raise lost()
        if self.plan.then == "close":
            closed = spb.SessionClosed(session_id="sess", reason="client_closed")
            yield spb.ServerEvent(
                seq=self.plan.upto + 1, event_id="ev-closed", session_closed=closed
            )


class FakeReplicas:
    """Hands out one stream per attempt, by plan; the last plan repeats."""

    def __init__(self, *plans: Plan) -> None:
        self._plans = plans
        self.calls: list[FakeCall] = []
        self.resuming: list[bool] = []

    async def connect(self, attempt: int, *, resuming: bool) -> SessionCall:
        assert attempt == len(self.calls), "attempts are counted one by one"
        self.resuming.append(resuming)
        call = FakeCall(self._plans[min(attempt, len(self._plans) - 1)])
        self.calls.append(call)
        return call


class Harness:
    def __init__(self, *plans: Plan) -> None:
        self.replicas = FakeReplicas(*plans)
        self.metrics = GatewayMetrics(CollectorRegistry())
        self.delivered: list[spb.ServerEvent] = []
        self.failover = FailOver(
            self.replicas, self.delivered.append, self.metrics, RETRY, max_pending_commands=8
        )

    def journaled_seqs(self) -> list[int]:
        """What the client got of the journal, in order (attachment events aside)."""
        return [e.seq for e in self.delivered if e.WhichOneof("kind") != "session_resumed"]

    def reconnects(self) -> float:
        return float(self.metrics.reconnects._value.get())

    def resume_cursors(self) -> list[int]:
        return [
            c.written[0].resume.last_received_seq
            for c in self.replicas.calls
            if c.written and c.written[0].HasField("resume")
        ]


async def follow(h: Harness, first: spb.ClientCommand = OPEN) -> None:
    await asyncio.wait_for(h.failover.follow(first), 2.0)


async def test_a_stream_dropped_mid_stream_resumes_elsewhere_from_the_last_delivered_event() -> (
    None
):
    h = Harness(Serve(5, "drop"), Serve(9, "close"))
    await follow(h)
    assert h.journaled_seqs() == list(range(1, 11))  # nothing twice, nothing skipped
    assert h.resume_cursors() == [5]
    resume = h.replicas.calls[1].written[0].resume
    assert (resume.session_id, resume.incarnation, resume.resume_token) == ("sess", 1, "tok-1")
    assert h.replicas.resuming == [False, True]
    assert h.reconnects() == 1


async def test_each_resume_carries_the_newest_cursor_and_token() -> None:
    h = Harness(Serve(3, "drop"), Serve(6, "drop"), Serve(8, "close"))
    await follow(h)
    assert h.journaled_seqs() == list(range(1, 10))
    assert h.resume_cursors() == [3, 6]
    assert h.replicas.calls[2].written[0].resume.resume_token == "tok-2"


async def test_a_refused_resume_that_may_pass_is_tried_again_unseen_by_the_client() -> None:
    h = Harness(
        Serve(4, "drop"), Refuse("server_error"), Refuse("rate_limit_error"), Serve(6, "close")
    )
    await follow(h)
    assert [e for e in h.delivered if e.HasField("error")] == []
    assert h.journaled_seqs() == list(range(1, 8))
    assert h.resume_cursors() == [4, 4, 4]
    assert h.reconnects() == 3


async def test_a_refusal_that_cannot_pass_is_told_and_ends_the_stream() -> None:
    h = Harness(Serve(4, "drop"), Refuse("invalid_request_error"), Serve(9, "close"))
    await follow(h)
    last = h.delivered[-1]
    assert (last.seq, last.error.type) == (0, "invalid_request_error")
    assert len(h.replicas.calls) == 2


async def test_a_refusal_of_the_clients_own_open_is_told_not_retried() -> None:
    h = Harness(Refuse("server_error"), Serve(3, "close"))
    await follow(h)
    assert [(e.seq, e.error.type) for e in h.delivered] == [(0, "server_error")]
    assert len(h.replicas.calls) == 1


async def test_replicas_that_never_come_back_give_up_at_the_deadline_as_unavailable() -> None:
    h = Harness(Serve(3, "drop"), Down())
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(SessionUnavailable) as raised:
        await follow(h)
    assert loop.time() - started >= RETRY.deadline_s
    assert (raised.value.type, raised.value.code) == ("server_error", "session_unavailable")
    assert len(h.replicas.calls) > 3  # tried again and again meanwhile
    assert set(h.resume_cursors()) <= {3}
    assert h.journaled_seqs() == [1, 2, 3]


async def test_a_stream_lost_before_the_session_answered_opens_it_again() -> None:
    h = Harness(Down(), Serve(2, "close"))
    await follow(h)
    assert h.replicas.calls[1].written[0] == OPEN
    assert h.journaled_seqs() == [1, 2, 3]


async def test_a_draining_replica_that_ends_the_stream_is_left_for_another() -> None:
    h = Harness(Serve(4, "end"), Serve(6, "close"))
    await follow(h)
    assert h.resume_cursors() == [4]
    assert h.journaled_seqs() == list(range(1, 8))


async def test_commands_keep_their_order_across_a_drop_and_none_is_lost() -> None:
    # The first stream takes two commands and is lost on the third: that one
    # goes first on the next stream, after the resume.
    h = Harness(Serve(2, "drop", drop_on_command=3), Serve(4, "close", until_goodbye=True))
    commands = [
        spb.ClientCommand(client_type="input_audio_buffer.clear", clear_input=spb.ClearInput())
        for _ in range(5)
    ]
    for i, cmd in enumerate(commands):
        cmd.event_id = f"cmd-{i}"
    session = asyncio.create_task(follow(h))
    for cmd in commands:
        await h.failover.put(cmd)
    await h.failover.say_last(GOODBYE, wait_s=1.0)
    await session
    first, second = h.replicas.calls
    assert first.written[1:] == commands[:2]
    assert second.written[0].HasField("resume")
    assert second.written[1:] == [*commands[2:], GOODBYE]
    assert second.half_closed  # nothing follows the goodbye


async def test_a_goodbye_lost_with_its_stream_is_said_again_on_the_next() -> None:
    h = Harness(Serve(3, "drop", until_goodbye=True), Serve(3, "end", until_goodbye=True))
    session = asyncio.create_task(follow(h))
    await h.failover.say_last(GOODBYE, wait_s=1.0)
    await session  # the session ended the stream once it heard: done
    first, second = h.replicas.calls
    assert first.written[-1] == GOODBYE
    assert second.written[1:] == [GOODBYE]


async def test_a_second_loss_long_after_a_fail_over_gets_a_deadline_of_its_own() -> None:
    later = asyncio.Event()
    h = Harness(Serve(3, "drop"), Serve(5, "drop", until=later), Down(), Serve(7, "close"))
    session = asyncio.create_task(follow(h))
    await asyncio.sleep(RETRY.deadline_s * 2)  # the first fail-over's deadline is long gone
    later.set()
    await session
    assert h.resume_cursors() == [3, 5, 5]
    assert h.journaled_seqs() == list(range(1, 9))
    assert h.reconnects() == 3


# ------------------------------------------------------------- the states
def test_a_loss_sets_the_deadline_once_and_the_backoff_grows_to_its_cap() -> None:
    s = FailOverState(RETRY)
    first = s.lost(10.0)
    assert first == FailingOver(10.0 + RETRY.deadline_s, RETRY.first_backoff_s)
    backoffs = [s.lost(11.0 + k).backoff for k in range(4)]
    assert backoffs == [0.002, 0.004, 0.004, 0.004]
    assert s.failing_over is not None and s.failing_over.deadline == first.deadline


def test_a_stream_the_session_answers_on_ends_the_fail_over() -> None:
    s = FailOverState(RETRY)
    s.lost(10.0)
    s.answered()
    assert s.state == Streaming()
    assert s.lost(20.0).deadline == 20.0 + RETRY.deadline_s  # a new one, its own deadline


def test_saying_goodbye_keeps_the_fail_over_it_is_in_and_its_deadline() -> None:
    s = FailOverState(RETRY)
    s.lost(10.0)
    s.say_goodbye(GOODBYE)
    assert s.goodbye == GOODBYE
    assert s.failing_over is not None and s.failing_over.deadline == 10.0 + RETRY.deadline_s
    s.answered()
    assert s.state == SayingGoodbye(GOODBYE)
    s.lost(30.0)
    assert s.goodbye == GOODBYE and s.failing_over is not None


def test_a_goodbye_is_never_taken_back() -> None:
    assert TRANSITIONS[SayingGoodbye] == {SayingGoodbye}
    s = FailOverState(RETRY)
    s.say_goodbye(GOODBYE)
    for step in (lambda: s.lost(1.0), s.answered, lambda: s.lost(2.0)):
        step()
        assert isinstance(s.state, SayingGoodbye)


def test_a_move_fail_over_does_not_make_raises() -> None:
    s = FailOverState(RETRY)
    s.say_goodbye(GOODBYE)
    with pytest.raises(IllegalTransition):
        s.move(Streaming())
    assert s.state == SayingGoodbye(GOODBYE)


async def test_the_deadline_passed_while_saying_goodbye_is_the_session_unavailable() -> None:
    # The client left; its goodbye's stream is lost and no replica comes back.
    h = Harness(Serve(3, "drop", until_goodbye=True), Down())
    session = asyncio.create_task(follow(h))
    await h.failover.say_last(GOODBYE, wait_s=1.0)
    with pytest.raises(SessionUnavailable):
        await session
    assert h.replicas.calls[0].written[-1] == GOODBYE
    assert len(h.replicas.calls) > 2  # tried again until the deadline
