"""What MiniCPM-o 4.5 does with one unit of a duplex session, in token ids.

A unit is a second of the user's audio (and maybe a camera frame) after
`<unit>`; the model answers it with a few sampled tokens and the unit closes
with its terminator and `</unit>`. The published duplex decoder's rules,
which this module owns:

- `<|listen|>`, `<|chunk_eos|>` and `<|chunk_tts_eos|>` end a unit.
  `<|turn_eos|>` ends the model's turn, not the unit: what it samples next
  (usually `<|listen|>`) does.
- The first token sampled is the unit's decision. It stays in the context
  but is never text.
- While its turn is open the model may not listen: a `<|listen|>` there is
  taken as `<|tts_bos|>` and sampling goes on.
- At most `MAX_SAMPLED` tokens a unit; then `<|chunk_eos|>` is forced.

vLLM's resumable request ends each piece of generation on a stop token and
drops that last sampled token from the context (it was never fed). So the
terminator, and `</unit>`, go at the head of the next unit's ids (`carry`),
and a listen taken as `<|tts_bos|>` is a continuation: a piece whose prompt
is `<|tts_bos|>` alone, with no new input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from antiphon.common.minicpmo import tokenizer as tok

# Sampled tokens a unit may have (the published `max_new_speak_tokens_per_chunk`
# is 20, its last step the forced `<|chunk_eos|>`).
MAX_SAMPLED = 19
DEFAULT_SYSTEM = "Streaming Omni Conversation."


@dataclass(frozen=True)
class Vocabulary:
    """The ids of the markers a duplex session uses."""

    unit_start: int
    unit_end: int
    listen: int
    speak: int
    chunk_eos: int
    chunk_tts_eos: int
    turn_eos: int
    tts_bos: int

    @classmethod
    def of(cls, tokenizer: Any) -> Vocabulary:
        ids = tokenizer.convert_tokens_to_ids
        return cls(
            unit_start=ids(tok.UNIT_START),
            unit_end=ids(tok.UNIT_END),
            listen=ids(tok.LISTEN),
            speak=ids(tok.SPEAK),
            chunk_eos=ids(tok.CHUNK_EOS),
            chunk_tts_eos=ids(tok.CHUNK_TTS_EOS),
            turn_eos=ids(tok.TURN_EOS),
            tts_bos=ids(tok.TTS_START),
        )

    @property
    def terminators(self) -> list[int]:
        """The stop tokens of a unit's generation."""
        return [self.listen, self.chunk_eos, self.chunk_tts_eos]


def system_ids(tokenizer: Any, instructions: str) -> list[int]:
    """The session's prefill: its system turn, and no user or assistant turn
    (units follow it directly, as the published duplex template has it)."""
    text = f"{tok.IM_START}system\n{instructions or DEFAULT_SYSTEM}{tok.IM_END}"
    return list(tokenizer.encode(text, add_special_tokens=False))


@dataclass(frozen=True)
class Answer:
    """What the model said to one unit."""

    speak: bool
    # Its text tokens: after the decision, up to and with `<|turn_eos|>`.
    text: tuple[int, ...]
    # The model closed its turn in this unit (it sampled `<|turn_eos|>`).
    turn_ended: bool
    # Every token the unit put in the context after its input, the
    # terminator and `</unit>` included (the talker's and the tests' record).
    tokens: tuple[int, ...]


@dataclass
class UnitState:
    """One session's place in the duplex decoder's rules, across units."""

    vocab: Vocabulary
    # A session starts with the model's turn closed: it may listen.
    turn_ended: bool = True
    # Ids the next unit's prompt starts with: the last unit's terminator and `</unit>`.
    carry: list[int] = field(default_factory=list)
    _sampled: list[int] = field(default_factory=list)

    def unit_head(self) -> list[int]:
        """The ids before a new unit's input: what closes the last one, `<unit>`."""
        head = [*self.carry, self.vocab.unit_start]
        self.carry = []
        self._sampled = []
        return head

    @property
    def budget(self) -> int:
        """How many more tokens this unit may sample."""
        return MAX_SAMPLED - len(self._sampled)

    def take(self, sampled: Sequence[int], stopped: bool) -> list[int] | None:
        """A piece of the unit's generation: the tokens sampled, and whether it
        ended on a stop token (else on its budget). The prompt of the piece
        that continues the unit, or None when the unit is closed."""
        v = self.vocab
        *fed, last = sampled
        self._record(fed)
        if stopped and last == v.listen and not self.turn_ended:
            # Not while speaking: the model goes on from `<|tts_bos|>`.
            self._sampled.append(v.tts_bos)
            if self.budget > 0:
                return [v.tts_bos]
            self.carry = [v.tts_bos, v.chunk_eos, v.unit_end]
            return None
        self._record([last])
        if stopped:
            self.carry = [self._sampled[-1], v.unit_end]
        else:  # the budget ran out: the last sampled is fed, then `<|chunk_eos|>`
            self.carry = [self._sampled[-1], v.chunk_eos, v.unit_end]
        return None

    def answer(self) -> Answer:
        """The unit just closed, as the model said it."""
        v = self.vocab
        sampled = self._sampled
        decision = sampled[0] if sampled else v.listen
        text: list[int] = []
        for token in sampled[1:]:
            if token in v.terminators:
                break
            text.append(token)
            if token == v.turn_eos:
                break
        tokens = (*sampled, *self.carry[1:]) if self.carry else tuple(sampled)
        return Answer(
            speak=decision != v.listen,
            text=tuple(t for t in text if t != v.tts_bos),
            turn_ended=v.turn_eos in text,
            tokens=tuple(tokens),
        )

    def _record(self, sampled: list[int]) -> None:
        v = self.vocab
        for token in sampled:
            if not self._sampled and token != v.listen:
                self.turn_ended = False  # it speaks: its turn is open
            if token == v.turn_eos:
                self.turn_ended = True
            self._sampled.append(token)
