"""Cut streamed LLM text into clauses that TTS can start speaking early.

Cuts land only where the next character proves a boundary (so "3." waiting
for "5" is never cut), and never inside a word. Every character fed comes
back exactly once, in order: a clause keeps its trailing punctuation and the
next one starts with the whitespace that followed it, so the transcript
deltas paired with the audio join to exactly the text the LLM produced.
"""

from __future__ import annotations

import re

_SENTENCE_END = ".!?\u2026"  # ... plus the single-character ellipsis
_SOFT_END = ",;:"
# Characters that may sit between a sentence end and the space after it.
_CLOSERS = "\"')]}\u201d\u2019\u00bb*_"
_OPENERS = "\"'([{\u201c\u2018\u00ab*_"
_WORD = re.compile(r"\S+")
# "e.g", "i.e", "U.S": dotted letters read as one abbreviation.
_DOTTED = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")
_ABBREVIATIONS = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "approx", "cf", "fig"}
)

# Enough words that a comma cut still sounds like a phrase, not a stutter.
DEFAULT_MIN_WORDS = 3
# With no punctuation at all, cut at a space past this length so a run-on
# reply still starts speaking (and Piper never gets one enormous input).
DEFAULT_MAX_CHARS = 240


def _word_count(text: str) -> int:
    return len(_WORD.findall(text))


def _has_letter(text: str) -> bool:
    return any(ch.isalpha() for ch in text)


def _is_abbreviation(before_dot: str) -> bool:
    """Whether the text ending just before a '.' ends in an abbreviation or an initial."""
    words = before_dot.split()
    if not words:
        return False
    word = words[-1].lstrip(_OPENERS)
    if len(word) == 1 and word.isalpha():
        return True  # an initial, as in "J. Smith"
    return word.lower() in _ABBREVIATIONS or _DOTTED.fullmatch(word) is not None


class ClauseSplitter:
    """Incremental clause splitter; pure, one instance per response."""

    def __init__(
        self,
        *,
        min_words: int = DEFAULT_MIN_WORDS,
        max_chars: int = DEFAULT_MAX_CHARS,
        first_words: int = 0,
    ) -> None:
        if min_words < 1 or max_chars < 1 or first_words < 0:
            raise ValueError("min_words and max_chars must be positive")
        self._min_words = min_words
        self._max_chars = max_chars
        # The first clause may end at any word boundary once it holds this many
        # words (0: only where punctuation allows): the listener hears the
        # answer start while the LLM is still writing its first sentence.
        self._first_words = first_words
        self._cut_before = False
        self._pending = ""

    def feed(self, text_delta: str) -> list[str]:
        """Add streamed text; return the clauses it completed (possibly none)."""
        self._pending += text_delta
        clauses: list[str] = []
        while (cut := self._find_cut(self._pending)) is not None:
            clauses.append(self._pending[:cut])
            self._pending = self._pending[cut:]
            self._cut_before = True
        return clauses

    def flush(self) -> str:
        """End of text: return whatever is left (may be empty or only whitespace)."""
        rest, self._pending = self._pending, ""
        return rest

    def take_words(self) -> str:
        """The whole words pending, now ("" when there are none): the text up to
        its last whitespace, so a word still being written stays. For a
        listener about to hear silence (playout.py); it counts as a cut."""
        buf = self._pending
        cuts = [m.start() for m in re.finditer(r"\s+", buf) if _has_letter(buf[: m.start()])]
        if not cuts:
            return ""
        self._pending = buf[cuts[-1] :]
        self._cut_before = True
        return buf[: cuts[-1]]

    @property
    def pending(self) -> str:
        return self._pending

    def _find_cut(self, buf: str) -> int | None:
        """Index after which `buf` holds a complete clause, or None to wait for more text."""
        n = len(buf)
        i = 0
        while i < n:
            ch = buf[i]
            if ch == "\n":
                if _has_letter(buf[:i]):
                    return i
                i += 1
                continue
            if ch not in _SENTENCE_END and ch not in _SOFT_END:
                i += 1
                continue
            hard = ch in _SENTENCE_END
            j = i + 1
            if hard:
                while j < n and buf[j] in _SENTENCE_END:
                    j += 1
            while j < n and buf[j] in _CLOSERS:
                j += 1
            if j == n:
                # The next character decides (decimal, "e.g.", closing quote):
                # nothing later can be cut before this one is settled.
                return None
            if buf[j].isspace() and self._accept(buf, i, j, hard):
                return j
            i = j
        return self._early_cut(buf) or self._overlong_cut(buf)

    def _early_cut(self, buf: str) -> int | None:
        if self._cut_before or not self._first_words:
            return None
        for m in re.finditer(r"\s+", buf):
            # A word is whole once whitespace follows it.
            if _word_count(buf[: m.start()]) >= self._first_words:
                return m.start()
        return None

    def _accept(self, buf: str, punct: int, end: int, hard: bool) -> bool:
        clause = buf[:end]
        if not _has_letter(clause):
            return False  # "1." of a numbered list, a lone "..."
        if not hard:
            return _word_count(clause) >= self._min_words
        # Only a lone '.' can be an abbreviation's; "?!" or "..." always end.
        lone_dot = buf[punct] == "." and buf[punct + 1] not in _SENTENCE_END
        return not (lone_dot and _is_abbreviation(buf[:punct]))

    def _overlong_cut(self, buf: str) -> int | None:
        if len(buf) < self._max_chars:
            return None
        # Cutting where a whitespace run starts ends the clause on a whole word.
        # Prefer the last such place within max_chars; past it only if one
        # enormous word left no earlier choice.
        starts = [
            m.start()
            for m in re.finditer(r"\s+", buf)
            if _word_count(buf[: m.start()]) >= self._min_words
        ]
        within = [s for s in starts if s < self._max_chars]
        if within:
            return within[-1]
        return starts[0] if starts else None
