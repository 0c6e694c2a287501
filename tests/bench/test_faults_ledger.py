"""bench.faults.ledger: loss, repeats and stuck responses over every socket of a session."""

from __future__ import annotations

from bench.faults.ledger import Ledger


def ev(seq: int, eid: str = "", kind: str = "x", **fields: object) -> dict[str, object]:
    return {"type": kind, "server_event_seq": seq, "event_id": eid or f"e{seq}", **fields}


def test_a_gap_below_the_highest_seq_is_lost_and_a_resync_counts_too() -> None:
    ledger = Ledger()
    for seq in (1, 2, 4):
        ledger.record(0.0, ev(seq))
    assert ledger.lost() == 1
    ledger.record(0.0, ev(0, kind="session.resync_required"))
    assert ledger.lost() == 2


def test_a_replayed_seq_is_repeated_and_conflicting_when_its_id_differs() -> None:
    ledger = Ledger()
    ledger.record(0.0, ev(1))
    ledger.record(0.0, ev(1))
    ledger.record(0.0, ev(1, eid="other"))
    assert (ledger.repeated, ledger.conflicting, ledger.lost()) == (2, 1, 0)


def test_attachment_events_carry_a_cursor_not_a_journal_position() -> None:
    ledger = Ledger()
    ledger.record(0.0, ev(1))
    ledger.record(0.0, ev(5, kind="session.resumed"))
    assert (ledger.last_seq, ledger.lost()) == (1, 0)


def test_a_response_created_before_a_time_without_its_done_is_stuck() -> None:
    ledger = Ledger()
    ledger.record(1.0, ev(1, kind="response.created", response={"id": "r1"}))
    ledger.record(2.0, ev(2, kind="response.created", response={"id": "r2"}))
    ledger.record(3.0, ev(3, kind="response.done", response={"id": "r1", "status": "completed"}))
    assert ledger.stuck() == 1
    assert ledger.stuck(before=1.5) == 0
    assert ledger.outcomes == [(3.0, "completed", "")]
