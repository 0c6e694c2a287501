"""The validators of a client event's fields (`fields`), through the events that use them."""

from __future__ import annotations

from typing import Any

import pytest

from antiphon.gateway.translate.translator import Translator
from tests.gateway import client_events as client


def test_a_dialect_that_takes_fewer_types_refuses_the_others_as_openai_does() -> None:
    openai_only = Translator(frozenset({"session.update", "input_audio_buffer.commit"}))
    assert openai_only.translate({"type": "input_audio_buffer.commit"}).WhichOneof("kind")
    for etype in ("session.heartbeat", "input.commit", "session.resume", "no.such.event", 4):
        err = client.refused({"type": etype, "event_id": "evt_x"}, openai_only)
        assert (err.code, err.param, err.type) == ("invalid_value", "type", "invalid_request_error")
        assert err.message == (
            f"Invalid value: {etype!r}. Supported values are: "
            "'input_audio_buffer.commit', 'session.update'."
        )


@pytest.mark.parametrize(
    ("event", "param"),
    [
        ({"type": "session.event_ack", "server_event_seq": 2**63}, "server_event_seq"),
        (
            {"type": "session.update", "session": {"max_output_tokens": 2**31}},
            "session.max_output_tokens",
        ),
        (
            {"type": "response.create", "response": {"max_output_tokens": 2**40}},
            "response.max_output_tokens",
        ),
        (
            {
                "type": "session.update",
                "session": {"turn_detection": {"silence_duration_ms": 2**31}},
            },
            "session.turn_detection.silence_duration_ms",
        ),
        (
            {"type": "input_audio_buffer.append", "audio": "", "sample_rate_hz": 2**40},
            "sample_rate_hz",
        ),
    ],
)
def test_numbers_past_the_proto_range_are_refused_not_crashed(
    event: dict[str, Any], param: str
) -> None:
    err = client.refused(event)
    assert (err.code, err.param) == ("invalid_value", param)
