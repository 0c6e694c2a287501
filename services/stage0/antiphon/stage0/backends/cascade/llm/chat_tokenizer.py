"""The model's chat template and tokenizer: prompts as text, and their token ids.

Every request renders the whole history again (the session sends all of it;
history.py fits it to the context) and needs its ids twice: the fit counts the
prompt, then vLLM gets its ids. Encoding a 20-turn, 2k-token prompt from
scratch takes ~2 ms on one core, twice a request (four times when the history
is cut), all on the worker's one event loop: with every session asking at
once, that queue stands in front of vLLM (issue 14).

A fast (Rust) tokenizer first cuts the text at its added tokens (ChatML's
`<|im_start|>`, `<|im_end|>`, ...) and then encodes each piece between them on
its own, so a prompt's ids are its pieces' ids joined. Here each piece is
encoded once per worker and kept (an LRU keyed by the piece's text): a new turn
costs the few pieces it adds, the rest of the history is a lookup
(bench/prompt_path.py, in git history, measured both paths).

That the pieces add up is the tokenizer's property, not ours to assume, so it
is checked when the tokenizer loads: a slow tokenizer, an added token that
strips the whitespace beside it or matches only whole words, or one whose
pieces fail a probe (a pre-tokenizer that gives only the text's very start a
prefix space) is encoded whole, each distinct prompt once.
tests/stage0/test_chat_tokenizer.py pins the equality for the default model.
"""

from __future__ import annotations

import array
import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

# Pieces kept: a piece is about one message (and each message's content once
# more, which history.py counts alone), so this holds ~40-turn histories of
# several hundred sessions. As int32 arrays, ~0.6 KB each with its key
# (measured, 20-turn sessions): ~20 MB full.
PIECES_KEPT = 32_768
# Whole prompts kept when the pieces do not add up: enough for the fit's count
# and the engine's encode of one prompt to meet, with many sessions in between.
PROMPTS_KEPT = 256
# Text around added tokens the way prompts have it: at the very start, right
# after a token, after a space, newlines, digits, other scripts.
_PROBE_PARTS = ("x", "system\nBe brief.", " there, 42", "\n\n", "héllo wörld 你好 ", "\n")


class ChatTokenizer:
    """Renders chat prompts with the model's template, and encodes them with its tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, *, pieces_kept: int = PIECES_KEPT):
        self._tokenizer = tokenizer
        cuts = _cut_tokens(tokenizer)
        self._split = _alternation(cuts) if cuts else None
        if self._split is not None and not self._adds_up(_probe(cuts), self._encoded):
            log.warning(
                "this tokenizer's pieces do not add up to its encoding; prompts encode whole"
            )
            self._split = None
        kept = pieces_kept if self._split is not None else PROMPTS_KEPT
        # functools' LRU is C code and thread-safe: a lookup costs about a dict's.
        self._ids_of = functools.lru_cache(maxsize=kept)(self._encoded)

    @classmethod
    def load(cls, model: str | Path) -> ChatTokenizer:
        """The tokenizer of the local Hugging Face folder (or cached model id) `model`."""
        tokenizer = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
        if not getattr(tokenizer, "chat_template", None):
            raise RuntimeError(f"{model}: tokenizer has no chat template")
        return cls(tokenizer)

    @property
    def by_pieces(self) -> bool:
        """Whether prompts are encoded piece by piece (else whole)."""
        return self._split is not None

    @property
    def encoded(self) -> int:
        """Texts encoded so far (pieces, or whole prompts), past the cache."""
        return self._ids_of.cache_info().misses

    def build_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        """(role, content) pairs, system first, as the model's chat template renders them."""
        return self.render_chat([{"role": role, "content": content} for role, content in messages])

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """Chat messages (with tool calls and results) and the functions the model
        may call, as its chat template renders them (tool_prompt.py builds both)."""
        rendered = self._tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=[dict(t) for t in tools] if tools else None,
            tokenize=False,
            add_generation_prompt=True,
        )
        if not isinstance(rendered, str):
            raise TypeError("chat template did not render to text")
        return rendered

    @property
    def takes_tools(self) -> bool:
        """Whether the chat template renders `tools=` itself (Qwen2.5's does, SmolLM2's not)."""
        return "tools" in str(getattr(self._tokenizer, "chat_template", "") or "")

    def encode(self, text: str) -> list[int]:
        """The ids of `text` exactly as the tokenizer encodes it whole; the
        chat template already wrote every special token the model needs."""
        ids: list[int] = []
        for piece in self._pieces(text):
            ids.extend(self._ids_of(piece))
        return ids

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def prepare(self, role: str, content: str) -> None:
        """Encode now the pieces of a message that a later prompt will hold.

        Of a turn's prompt, only the messages new since the last are pieces not
        yet encoded: the user's words and the answer before them. Both are the
        worker's own output (its transcript, its answer), known before the
        session asks for the next turn, so their pieces are encoded then,
        rendered alone by the same template, rather than on the request path,
        where a burst of sessions asking at once queues behind them (issue
        14). A message the session changed meanwhile (an answer cut short by
        a barge-in) only misses the cache, as before.
        """
        if self._split is not None:
            self.encode(self.render_chat([{"role": role, "content": content}]))

    def _pieces(self, text: str) -> Iterable[str]:
        if self._split is None:
            return (text,)
        # split() with a group keeps the added tokens as pieces of their own.
        return (piece for piece in self._split.split(text) if piece)

    def _encoded(self, text: str) -> array.array[int]:
        # int32 ids: a quarter of a list of Python ints, and vocabularies fit.
        return array.array("i", self._tokenizer.encode(text, add_special_tokens=False))

    def _adds_up(self, text: str, encoded: Callable[[str], array.array[int]]) -> bool:
        joined = [i for piece in self._pieces(text) for i in encoded(piece)]
        return joined == list(self._tokenizer.encode(text, add_special_tokens=False))


class ChatPrompts:
    """What every LLM engine answers from its chat tokenizer alone: prompts as
    the model's template renders them, their lengths, and the context's size.
    The engines (llm.py's vLLM, llm_llamacpp.py's llama.cpp) add generation."""

    def __init__(self, chat: ChatTokenizer, max_model_len: int) -> None:
        self._chat = chat
        self._max_model_len = max_model_len

    def build_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        """(role, content) pairs, system first, as the model's chat template renders them."""
        return self._chat.build_prompt(messages)

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """Chat messages and the functions the model may call, as its template renders them."""
        return self._chat.render_chat(messages, tools)

    @property
    def takes_tools(self) -> bool:
        """Whether the chat template renders `tools=` itself (Qwen2.5's does, SmolLM2's not)."""
        return self._chat.takes_tools

    def prepare(self, role: str, content: str) -> None:
        """Encode ahead a message this worker produced for a later prompt."""
        self._chat.prepare(role, content)

    def count_tokens(self, prompt: str) -> int:
        """The prompt's length in tokens: what its ids will be (the same cache) cost."""
        return self._chat.count_tokens(prompt)

    @property
    def max_model_len(self) -> int:
        """Prompt plus output tokens one request may hold; prompts must stay below it."""
        return self._max_model_len


def _cut_tokens(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The added tokens at which the tokenizer itself first cuts any text (none: no cutting).

    HF tokenizers match the added tokens that are not `normalized` in the raw
    text, leftmost and longest first, before normalising or pre-tokenising
    anything. Normalised ones are matched later inside each piece, which
    encoding the piece alone does too. A token that takes in the whitespace
    beside it (`lstrip`, `rstrip`) or matches only whole words moves the cut:
    no cutting then.
    """
    if not getattr(tokenizer, "is_fast", False):
        return []
    added = list(tokenizer.added_tokens_decoder.values())
    if any(t.lstrip or t.rstrip or t.single_word for t in added):
        return []
    return sorted({t.content for t in added if not t.normalized and t.content})


def _alternation(tokens: Sequence[str]) -> re.Pattern[str]:
    """Matches any of `tokens`, leftmost then longest first, as the tokenizer does."""
    longest_first = sorted(tokens, key=len, reverse=True)
    return re.compile("(" + "|".join(re.escape(t) for t in longest_first) + ")")


def _probe(tokens: Sequence[str]) -> str:
    """The `_PROBE_PARTS`, each followed by one of the first added tokens."""
    used = tokens[:3]
    return "".join(part + used[i % len(used)] for i, part in enumerate(_PROBE_PARTS)) + "x"
