"""ClauseSplitter: early cuts at clause ends, never inside a word, lossless joins."""

from __future__ import annotations

import re

import pytest

from antiphon.stage1.speech.clauses import ClauseSplitter

TEXTS = [
    "Hello there. How are you? I am fine, thanks for asking!",
    "It costs 3.5 dollars, e.g. a small coffee. Mr. Smith met J. Doe at 10:30 today; then left.",
    '1. First item\n2. Second item\n\nDone...  ok "Quoted." Next one',
    "Well, I think so. Yes! No? Maybe... Really?! Sure.",
    "  Leading spaces, and trailing ones.   ",
    "Numbers like 1,000,000 and 3.14159 stay whole, as do URLs like example.com/a.b today.",
    "No punctuation at all in this one " * 12,
    "Supercalifragilisticexpialidocious" * 10 + " then some more words after it.",
    "Unicode works too: caf\u00e9 na\u00efve \u201cquoted.\u201d Then\u2026 more \u2014 dashes.",
    "",
    "   ",
    "Trailing newline.\n",
]

DELTA_SIZES = [1, 2, 3, 5, 8, 1000]


def _split(text: str, step: int, splitter: ClauseSplitter | None = None) -> list[str]:
    splitter = splitter or ClauseSplitter()
    out: list[str] = []
    for i in range(0, len(text), step):
        out.extend(splitter.feed(text[i : i + step]))
    out.append(splitter.flush())
    return out


def _word_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"\S+", text)]


@pytest.mark.parametrize("step", DELTA_SIZES)
@pytest.mark.parametrize("text", TEXTS)
def test_joins_back_exactly(text: str, step: int) -> None:
    assert "".join(_split(text, step)) == text


@pytest.mark.parametrize("step", DELTA_SIZES)
@pytest.mark.parametrize("text", TEXTS)
def test_never_cuts_inside_a_word(text: str, step: int) -> None:
    cuts: set[int] = set()
    pos = 0
    for clause in _split(text, step)[:-1]:
        pos += len(clause)
        cuts.add(pos)
    for start, end in _word_spans(text):
        assert not any(start < cut < end for cut in cuts), (text, cuts)


@pytest.mark.parametrize("text", [t for t in TEXTS if len(t) < 200])
def test_cuts_do_not_depend_on_delta_sizes(text: str) -> None:
    expected = _split(text, len(text) or 1)
    for step in DELTA_SIZES:
        assert _split(text, step) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello there. How are you?", ["Hello there.", " How are you?"]),
        ("Yes! No? Fine.", ["Yes!", " No?", " Fine."]),
        ("In the morning, we walk; then sleep.", ["In the morning,", " we walk; then sleep."]),
        ("Well, maybe so.", ["Well, maybe so."]),
        ("Pi is 3.14 roughly. Next", ["Pi is 3.14 roughly.", " Next"]),
        ("Bring fruit, e.g. apples. Done", ["Bring fruit, e.g. apples.", " Done"]),
        ("I met Dr. Who and J. R. Tolkien. Ok", ["I met Dr. Who and J. R. Tolkien.", " Ok"]),
        ('He said "stop." Then', ['He said "stop."', " Then"]),
        ("Wait... what?! No", ["Wait...", " what?!", " No"]),
        ("1. Eggs\n2. Milk", ["1. Eggs", "\n2. Milk"]),
        ("At 10:30 we met. Ok", ["At 10:30 we met.", " Ok"]),
        ("We have 1,000 of them. Ok", ["We have 1,000 of them.", " Ok"]),
    ],
)
def test_cut_points(text: str, expected: list[str]) -> None:
    clauses = _split(text, 1)
    assert [c for c in clauses if c] == expected


def test_waits_for_the_character_after_a_dot() -> None:
    splitter = ClauseSplitter()
    assert splitter.feed("It costs 3.") == []
    assert splitter.feed("5 euros. And") == ["It costs 3.5 euros."]
    assert splitter.flush() == " And"


def test_first_clause_comes_before_the_sentence_ends() -> None:
    splitter = ClauseSplitter()
    out = splitter.feed("Sure, I can help you with that, ")
    assert out == ["Sure, I can help you with that,"]


def test_overlong_run_on_is_cut_at_a_space() -> None:
    splitter = ClauseSplitter(max_chars=40)
    out = splitter.feed("word " * 20)
    assert out and all(len(c) <= 45 for c in out)
    assert all(not c.endswith("wor") for c in out)


def test_flush_resets() -> None:
    splitter = ClauseSplitter()
    splitter.feed("unfinished")
    assert splitter.flush() == "unfinished"
    assert splitter.flush() == ""
    assert splitter.feed("Fresh start. ") == ["Fresh start."]


def test_rejects_bad_limits() -> None:
    with pytest.raises(ValueError):
        ClauseSplitter(min_words=0)


def test_first_clause_may_end_early_at_a_word_boundary_and_only_the_first() -> None:
    splitter = ClauseSplitter(first_words=4)
    out: list[str] = []
    for token in ["The", " capital", " of", " France", " is", " Paris", " and", " it", " is"]:
        out += splitter.feed(token)
    assert out == ["The capital of France"]  # later clauses wait for punctuation
    out += splitter.feed(" big. ")
    assert out == ["The capital of France", " is Paris and it is big."]
    assert "".join(out) + splitter.flush() == "The capital of France is Paris and it is big. "


def test_first_clause_prefers_punctuation_that_comes_first() -> None:
    splitter = ClauseSplitter(first_words=4)
    assert splitter.feed("Yes, it is. Paris is ") == ["Yes, it is."]
