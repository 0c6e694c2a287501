"""The dialects a socket may speak (`dialect`): which route speaks which, what
each takes, and that each projects every server event kind or says why not."""

from __future__ import annotations

import json

import pytest

from antiphon.common.event_kinds import EventKind, kind_of
from antiphon.gateway.dialects import openai_dialect as od
from antiphon.gateway.dialects.dialect import DUPLEX, NATIVE, OPENAI, Dialect, realtime_dialect
from antiphon.gateway.translate.translator import Translator
from antiphon.v1 import session_pb2 as spb
from tests.gateway import server_events as server


def test_the_route_picks_the_dialect_by_the_duplex_opt_in() -> None:
    assert realtime_dialect({}) is OPENAI
    assert realtime_dialect({"duplex": "0"}) is OPENAI
    assert realtime_dialect({"duplex": "1"}) is DUPLEX
    assert realtime_dialect({"duplex": "true"}) is DUPLEX
    assert OPENAI.opens_on_connect and OPENAI.client_types == od.CLIENT_TYPES
    assert not DUPLEX.opens_on_connect and DUPLEX.client_types is None
    assert not NATIVE.opens_on_connect and NATIVE.client_types is None


def test_extension_client_events_are_refused_and_openai_s_taken() -> None:
    translator = Translator(OPENAI.client_types)
    for etype in ("session.heartbeat", "playback.ack", "barge_in", "session.close", "push_chunk"):
        with pytest.raises(Exception) as info:
            translator.translate({"type": etype})
        assert getattr(info.value, "code", None) == "invalid_value"
    cmd = translator.translate({"type": "response.create", "response": {"instructions": None}})
    assert cmd.WhichOneof("kind") == "create_response"


# Kinds a dialect does not send, each with its reason: only OpenAI's leaves any out.
NOT_SENT: dict[str, dict[EventKind, str]] = {
    DUPLEX.name: {},
    NATIVE.name: {},
    OPENAI.name: od.NOT_SENT,
}


@pytest.mark.parametrize("dialect", [DUPLEX, NATIVE, OPENAI], ids=lambda d: d.name)
@pytest.mark.parametrize("kind", server.KINDS)
def test_every_server_event_kind_is_projected_or_not_sent_for_a_reason(
    dialect: Dialect, kind: str
) -> None:
    """The kinds are the protos' (read from the descriptor): a kind they gain fails
    here, in each dialect, until the dialect projects it or says why it does not."""
    ev = server.event(kind)
    assert dialect.projector is not None  # GPT-Live's: test_live_dialect.py
    frames = dialect.projector()(ev)
    reason = NOT_SENT[dialect.name].get(kind_of(ev))
    if reason is None:
        assert len(frames) == 1 and isinstance(frames[0]["type"], str), kind
        json.dumps(frames)  # plain JSON
    else:
        assert reason.strip() and frames == [], kind


def test_an_event_without_a_kind_is_refused_by_every_dialect() -> None:
    """An event whose oneof holds no kind is a bug upstream: no dialect guesses a frame."""
    for dialect in (DUPLEX, NATIVE, OPENAI):
        assert dialect.projector is not None
        with pytest.raises(ValueError):
            dialect.projector()(spb.ServerEvent(seq=1, event_id="event_x"))
