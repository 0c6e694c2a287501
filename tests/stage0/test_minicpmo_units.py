"""The published duplex decoder's rules for one unit (backends/minicpmo/units.py),
as token ids: what a unit's pieces put in the context, what the model said."""

from __future__ import annotations

from antiphon.stage0.backends.minicpmo.units import MAX_SAMPLED, UnitState, Vocabulary

V = Vocabulary(
    unit_start=1,
    unit_end=2,
    listen=3,
    speak=4,
    chunk_eos=5,
    chunk_tts_eos=6,
    turn_eos=7,
    tts_bos=8,
)
A, B, C = 100, 101, 102  # text


def test_a_listening_unit_closes_on_listen_and_carries_it_into_the_next_unit() -> None:
    state = UnitState(V)
    assert state.unit_head() == [V.unit_start]
    assert state.take([V.listen], stopped=True) is None
    answer = state.answer()
    assert (answer.speak, answer.text, answer.turn_ended) == (False, (), False)
    # vLLM dropped the stop token it sampled: it goes first in the next unit.
    assert state.unit_head() == [V.listen, V.unit_end, V.unit_start]
    assert state.turn_ended


def test_a_spoken_unit_is_text_after_the_decision_and_opens_the_turn() -> None:
    state = UnitState(V)
    state.unit_head()
    assert state.take([V.speak, A, B, V.chunk_eos], stopped=True) is None
    answer = state.answer()
    assert (answer.speak, answer.text) == (True, (A, B))
    assert answer.tokens == (V.speak, A, B, V.chunk_eos, V.unit_end)
    assert not state.turn_ended


def test_listen_while_the_turn_is_open_is_tts_bos_and_the_unit_goes_on() -> None:
    state = UnitState(V, turn_ended=False)
    state.unit_head()
    # The model sampled <|listen|> mid-turn: the unit continues from <|tts_bos|>.
    assert state.take([A, V.listen], stopped=True) == [V.tts_bos]
    assert state.budget == MAX_SAMPLED - 2
    assert state.take([B, V.turn_eos, V.listen], stopped=True) is None
    answer = state.answer()
    assert answer.speak and answer.turn_ended
    assert answer.text == (B, V.turn_eos)  # the decision (A) is no text
    assert state.turn_ended  # <|turn_eos|> closed it: <|listen|> now ends the unit
    assert state.unit_head() == [V.listen, V.unit_end, V.unit_start]


def test_a_unit_that_spends_its_budget_ends_with_a_forced_chunk_eos() -> None:
    state = UnitState(V)
    state.unit_head()
    sampled = [V.speak] + [A] * (MAX_SAMPLED - 1)
    assert state.take(sampled, stopped=False) is None
    assert len(state.answer().text) == MAX_SAMPLED - 1
    # The last sampled token was never fed: it goes first, then <|chunk_eos|>.
    assert state.unit_head() == [A, V.chunk_eos, V.unit_end, V.unit_start]


def test_a_mid_turn_listen_on_the_last_of_the_budget_closes_the_unit() -> None:
    state = UnitState(V, turn_ended=False)
    state.unit_head()
    assert state.take([A] * (MAX_SAMPLED - 1) + [V.listen], stopped=True) is None
    assert state.unit_head() == [V.tts_bos, V.chunk_eos, V.unit_end, V.unit_start]
    assert not state.turn_ended


def test_text_stops_at_turn_eos() -> None:
    state = UnitState(V)
    state.unit_head()
    state.take([V.speak, A, V.turn_eos, C, V.chunk_eos], stopped=True)
    assert state.answer().text == (A, V.turn_eos)
