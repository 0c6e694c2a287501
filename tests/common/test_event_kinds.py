"""The typed kinds of server event (`event_kinds`) are exactly the protos' own."""

from __future__ import annotations

import pytest

from antiphon.common.event_kinds import KINDS, body_of, kind_of
from antiphon.v1 import session_pb2 as spb
from tests.gateway import server_events as server


def test_kind_spells_exactly_the_oneof_cases_of_the_protos() -> None:
    """`server.KINDS` is read from the descriptor: a kind added to (or renamed in)
    `ServerEvent.kind` fails here until `EventKind` spells it too."""
    assert list(KINDS) == server.KINDS


@pytest.mark.parametrize("kind", server.KINDS)
def test_kind_of_reads_the_kind_and_body_of_its_message(kind: str) -> None:
    ev = server.event(kind)
    assert kind_of(ev) == kind
    assert body_of(ev, kind_of(ev)).DESCRIPTOR is ev.DESCRIPTOR.fields_by_name[kind].message_type


def test_body_of_is_the_message_the_event_carries() -> None:
    ev = server.event("audio_delta", spb.AudioDelta(audio=b"\x01\x00", audio_duration_ms=5))
    assert body_of(ev, "audio_delta") == spb.AudioDelta(audio=b"\x01\x00", audio_duration_ms=5)


def test_an_event_without_a_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="without a kind"):
        kind_of(spb.ServerEvent(seq=1, event_id="event_x"))
