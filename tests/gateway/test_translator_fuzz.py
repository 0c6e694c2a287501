"""Fuzzed client events: each is one typed refusal or one legal command, never a crash.

Hypothesis generates hostile events (`tests/support/fuzz.py`). A refusal must
be a `ClientError` in the Realtime error envelope; a command must be
complete and serialisable (what crosses the gRPC hop); and a refused event
must leave the translator as it was. Derandomized with a fixed example
budget: CI runs the same few thousand events each time.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from antiphon.gateway.dialects import native
from antiphon.gateway.dialects.openai_dialect import CLIENT_TYPES
from antiphon.gateway.errors import ClientError
from antiphon.gateway.translate.translator import Translator, metric_label
from antiphon.v1 import session_pb2 as spb
from tests.support.fuzz import ERROR_TYPES, FUZZ, client_events, examples


def _wire(event: Any) -> Any:
    """The event as the gateway would see it: JSON that survived a round trip
    (json.loads accepts NaN and Infinity, so they stay)."""
    return json.loads(json.dumps(event))


def _check_refusal(err: ClientError) -> None:
    assert isinstance(err.code, str) and err.code, err
    assert err.type in ERROR_TYPES, err.type
    assert isinstance(err.message, str) and err.message, err
    assert isinstance(err.param, str)
    # The refusal goes to the session inside a command: it must serialise.
    spb.ClientCommand(
        rejected=spb.ErrorEvent(type=err.type, code=err.code, message=err.message, param=err.param)
    ).SerializeToString()


def _check_command(cmd: spb.ClientCommand) -> None:
    assert cmd.WhichOneof("kind") is not None, cmd
    assert cmd.client_type, cmd
    cmd.SerializeToString()


def _state(translator: Translator) -> dict[str, Any]:
    return copy.deepcopy(vars(translator))


def _answer(translator: Translator, event: Any, *, handshake: bool) -> None:
    """One event in, as the connection handles it: normalised, translated; exactly
    one of a command or a typed refusal, and a refusal changes nothing."""
    before = _state(translator)
    try:
        if not isinstance(event, dict):
            raise ClientError("invalid_event", "an event must be a JSON object")
        metric_label(event)
        if handshake:
            cmd = translator.open(native.normalize(event), {})
        else:
            cmd = translator.translate(event)
    except ClientError as err:
        _check_refusal(err)
        assert _state(translator) == before, "a refused event changed the translator"
        return
    _check_command(cmd)


@FUZZ
@given(st.lists(client_events(), min_size=1, max_size=3))
def test_every_fuzzed_event_on_the_duplex_dialect_is_a_command_or_one_typed_error(
    events: list[Any],
) -> None:
    translator = Translator()
    for event in events:
        _answer(translator, _wire(event), handshake=False)


@settings(FUZZ, max_examples=examples(600))
@given(client_events())
def test_every_fuzzed_event_on_openai_s_dialect_is_a_command_or_one_typed_error(
    event: Any,
) -> None:
    _answer(Translator(CLIENT_TYPES), _wire(event), handshake=False)


@settings(FUZZ, max_examples=examples(600))
@given(client_events())
def test_every_fuzzed_opening_event_opens_resumes_or_is_one_typed_error(event: Any) -> None:
    """The handshake (`session.update`, `session.resume`, native `session.create`)."""
    _answer(Translator(), _wire(event), handshake=True)


def test_the_fuzzer_reaches_commands_as_well_as_refusals() -> None:
    """A generator that only ever made junk would pass vacuously: well-formed
    events of many kinds are among what it makes."""
    kinds: set[str] = set()
    refusals: set[str] = set()

    # All 800 in every tier: fewer may miss a kind, and this test is its guarantee.
    @settings(FUZZ, max_examples=800)
    @given(client_events())
    def collect(event: Any) -> None:
        event = _wire(event)
        if not isinstance(event, dict):
            return
        try:
            kinds.add(str(Translator().translate(event).WhichOneof("kind")))
        except ClientError as err:
            refusals.add(err.code)

    collect()
    assert len(kinds) >= 8, kinds
    assert {"invalid_event", "invalid_value"} <= refusals, refusals
