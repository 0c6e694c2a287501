"""Text a session puts into its running row's context (`Stage0Context`): a
FIFO of the model's own text tokens, forced into the row's text stream one a
frame, and when each context's last token went in.

Moshi's text stream is its inner monologue, aligned to its speech: a word's
pieces start where the word starts, and the model pads (`PAD`) while it says
it, the last pad before the next word often `EPAD` ("a word comes next").
Its speech follows that text (the depth transformer reads the frame's text
token before it makes the frame's audio), so what is forced into the stream
is said, at the pace the stream gives it. Pieces back to back would ask for
12.5 a second, some three times faster than anyone speaks, and the model's
audio could not follow them. So the pacing is the one moshi's own TTS state
machine (`moshi.models.tts.StateMachine`) uses for text without timings,
with the model's own signal:

- a word's pieces are forced on consecutive frames;
- between two words the model runs free while it pads; the next word goes in
  at the frame where the model would say a word of its own (that token is
  replaced), or at the frame after it says `EPAD`, or after `PAD_BUDGET`
  frames of padding at most, so that a model that never moves on cannot
  hold the queue;
- a context's first word, on a row with nothing queued, goes in at the next
  frame: the session asked for it now.

Plain objects, no torch: the lockstep offers each row's next token to the
LM's text hook (lockstep.py) and tells the queue what the row's text became.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Tokens a row may hold queued (`duplex_context_text_max_tokens`): 2048 take
# 2.7 minutes at the very least (a token a frame), more than an instruction
# or an answer to speak needs, and cost a few kilobytes per row.
DEFAULT_LIMIT = 2048
# Frames of the model's own padding after a forced word before the next is
# forced anyway: moshi's TTS state machine's `max_padding` (480 ms), about
# the longest a word's own pads last in speech.
PAD_BUDGET = 6


def words(encode: Callable[[str], list[int]], text: str, silent: frozenset[int]) -> list[list[int]]:
    """`text` as the model's text tokens, word by word (each encoded alone,
    so each starts with the tokenizer's word mark). Silent ids (what a
    tokenizer gives an unknown character, say) are left out: forced, they
    would be padding, not speech."""
    out: list[list[int]] = []
    for word in text.split():
        tokens = [t for t in encode(word) if t not in silent]
        if tokens:
            out.append(tokens)
    return out


@dataclass(frozen=True)
class Offer:
    """This frame's token for the row; `firm`: forced whatever the model
    samples, else only if the model would say a word (not pad) there."""

    token: int
    firm: bool


@dataclass(frozen=True)
class Taken:
    """A context's last token went in: its text is that of frame `index`."""

    epoch: int
    id: str
    index: int


@dataclass
class _Context:
    epoch: int
    id: str
    # (token, starts a word), in order.
    tokens: deque[tuple[int, bool]] = field(default_factory=deque)


class ContextQueue:
    """One row's queued contexts, at most `limit` tokens waiting."""

    def __init__(self, limit: int, *, pad: int, end_pad: int) -> None:
        self.limit = limit
        self._pad = pad
        self._end_pad = end_pad
        self._contexts: deque[_Context] = deque()
        self._queued = 0
        self._idle()

    def _idle(self) -> None:
        # Nothing in flight: the next word goes in at once.
        self._padded = PAD_BUDGET
        self._signalled = False

    @property
    def queued(self) -> int:
        """Tokens waiting to be forced."""
        return self._queued

    def __bool__(self) -> bool:
        return bool(self._contexts)

    def push(self, epoch: int, id: str, tokens: Sequence[Sequence[int]]) -> bool:
        """Queue a context (its tokens word by word) behind the others; False,
        and nothing queued, when it would leave more than `limit` waiting."""
        count = sum(len(word) for word in tokens)
        if not count and not self._contexts:
            raise ValueError("nothing to say and nothing before it: it is taken at once")
        if self._queued + count > self.limit:
            return False
        context = _Context(epoch, id)
        for word in tokens:
            context.tokens.extend((token, i == 0) for i, token in enumerate(word))
        self._contexts.append(context)
        self._queued += count
        return True

    def offer(self) -> Offer | None:
        """What to force at this frame (None: the model runs free)."""
        if not self._contexts:
            return None
        token, starts_word = self._contexts[0].tokens[0]
        firm = not starts_word or self._signalled or self._padded >= PAD_BUDGET
        return Offer(token, firm)

    def settle(self, said: int, index: int) -> list[Taken]:
        """The row's text token at the frame `offer` was asked for (after
        forcing), which is frame `index`: the contexts whose last token it was."""
        if not self._contexts:
            return []
        if said in (self._pad, self._end_pad):
            # The model padded where a word was offered: it is still saying the last.
            self._padded += 1
            self._signalled = said == self._end_pad
            return []
        head = self._contexts[0]
        head.tokens.popleft()
        self._queued -= 1
        self._padded, self._signalled = 0, False
        taken: list[Taken] = []
        # Contexts with nothing (left) to say behind it are taken with it.
        while self._contexts and not self._contexts[0].tokens:
            done = self._contexts.popleft()
            taken.append(Taken(done.epoch, done.id, index))
        if not self._contexts:
            self._idle()
        return taken
