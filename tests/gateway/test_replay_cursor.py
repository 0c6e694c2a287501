"""The replay cursor: what a resume on another replica says."""

from __future__ import annotations

from antiphon.common.event_kinds import kind_of
from antiphon.gateway.connection.replay_cursor import ReplayCursor
from antiphon.v1 import session_pb2 as spb


def note(cursor: ReplayCursor, ev: spb.ServerEvent) -> None:
    cursor.note(ev, kind_of(ev))


def created() -> spb.ServerEvent:
    state = spb.SessionState(session_id="sess", incarnation=2, resume_token="tok-1")
    return spb.ServerEvent(seq=1, session_created=state)


def resumed(seq: int, token: str) -> spb.ServerEvent:
    r = spb.SessionResumed(session_id="sess", incarnation=2, resume_token=token)
    return spb.ServerEvent(seq=seq, session_resumed=r)


def delta(seq: int) -> spb.ServerEvent:
    return spb.ServerEvent(seq=seq, text_delta=spb.TextDelta(delta="x"))


def test_nothing_to_resume_before_a_session_was_opened() -> None:
    cursor = ReplayCursor()
    note(cursor, spb.ServerEvent(seq=0, error=spb.ErrorEvent(type="server_error")))
    assert cursor.resume() is None


def test_a_resume_names_the_session_and_the_last_delivered_event() -> None:
    cursor = ReplayCursor()
    for ev in (created(), delta(2), delta(3)):
        note(cursor, ev)
    cmd = cursor.resume()
    assert cmd is not None and cmd.client_type == "session.resume"
    r = cmd.resume
    assert (r.session_id, r.incarnation, r.resume_token, r.last_received_seq) == (
        "sess",
        2,
        "tok-1",
        3,
    )


def test_attachment_events_do_not_move_the_cursor_but_renew_the_token() -> None:
    cursor = ReplayCursor()
    for ev in (created(), delta(2), delta(3)):
        note(cursor, ev)
    # Their seq is an attachment's cursor, not a journal position.
    note(cursor, resumed(7, "tok-2"))
    note(cursor, spb.ServerEvent(seq=9, resync_required=spb.ResyncRequired()))
    cmd = cursor.resume()
    assert cmd is not None
    assert (cmd.resume.last_received_seq, cmd.resume.resume_token) == (3, "tok-2")


def test_a_socket_resumed_by_its_client_fails_over_from_the_clients_cursor() -> None:
    cursor = ReplayCursor()
    note(cursor, resumed(40, "tok-9"))  # the client said it holds up to 40
    note(cursor, delta(41))
    cmd = cursor.resume()
    assert cmd is not None
    assert (cmd.resume.session_id, cmd.resume.last_received_seq) == ("sess", 41)
    assert cmd.resume.resume_token == "tok-9"


def test_a_replayed_event_never_moves_the_cursor_back() -> None:
    cursor = ReplayCursor()
    for ev in (created(), delta(2), delta(5), delta(4)):
        note(cursor, ev)
    cmd = cursor.resume()
    assert cmd is not None and cmd.resume.last_received_seq == 5
