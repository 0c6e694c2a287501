"""How one llama.cpp request picks each next token from a step's logits.

vLLM's decoding, redone on the logits llama.cpp hands back: greedy at
temperature 0, else a draw from the softmax; the repetition penalty on every
token of the prompt and the output (vLLM's rule: positive logits divided,
negative multiplied); the allowed tokens; a grammar for guided output, run by
llama.cpp's own grammar sampler. The grammar is asked first about the token
the logits pick (one candidate), and only when it refuses that one about the
whole vocabulary, as llama.cpp's server does: most steps of a guided answer
cost one check, not 150,000.
"""

from __future__ import annotations

import codecs
import ctypes
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from antiphon.stage0.backends.cascade.llm.generation import Decoding
from antiphon.stage0.backends.cascade.llm.repetition import LoopGuard

Logits = npt.NDArray[np.float32]
# llama.cpp's llama_token_data, as a numpy record.
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


class Sampler:
    """One request's token choices, loop stop and text decoding."""

    def __init__(
        self,
        vocab: Any,
        n_vocab: int,
        *,
        prompt: Sequence[int],
        temperature: float,
        decoding: Decoding,
        grammar: str | None,
        seed: int = 0,
    ) -> None:
        self._n_vocab = n_vocab
        self._temperature = temperature
        self._penalty = decoding.repetition_penalty
        self.guard = LoopGuard(decoding.loop_ngram, decoding.loop_repeats)
        self._seen: npt.NDArray[np.bool_] | None = None
        if self._penalty != 1.0:
            self._seen = np.zeros(n_vocab, dtype=bool)
            self._seen[[t for t in prompt if t < n_vocab]] = True
        self._mask: Logits | None = None
        if decoding.allowed_token_ids is not None:
            self._mask = np.full(n_vocab, -np.inf, dtype=np.float32)
            self._mask[list(decoding.allowed_token_ids)] = 0.0
        self._grammar = (
            llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
            if grammar
            else None
        )
        if grammar and not self._grammar:
            raise ValueError("llama.cpp refused the grammar of a guided request")
        self._rng = np.random.default_rng(seed)
        # Pieces are bytes: a character split over two tokens is held until whole.
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def choose(self, logits: Logits) -> int:
        """The next token (`logits` is this request's own copy: it is changed)."""
        if self._seen is not None:
            seen = logits[self._seen]
            logits[self._seen] = np.where(seen > 0, seen / self._penalty, seen * self._penalty)
        if self._mask is not None:
            logits += self._mask
        token = self._pick(logits)
        if self._grammar is not None and not self._allows(token):
            self._apply_grammar(logits)
            token = self._pick(logits)
        return token

    def accept(self, token: int) -> None:
        """`token` is the output's next: the grammar and the penalty move on."""
        if self._grammar is not None:
            llama_cpp.llama_sampler_accept(self._grammar, token)
        if self._seen is not None:
            self._seen[token] = True

    def text(self, piece: bytes, *, final: bool = False) -> str:
        """The text `piece` completes (nothing while a character is still partial)."""
        return self._text.decode(piece, final=final)

    def close(self) -> None:
        if self._grammar is not None:
            llama_cpp.llama_sampler_free(self._grammar)
            self._grammar = None

    def _pick(self, logits: Logits) -> int:
        if self._temperature <= 0.0:
            return int(np.argmax(logits))
        scaled = (logits - logits.max()).astype(np.float64) / self._temperature
        probs = np.exp(scaled)
        probs /= probs.sum()
        return int(self._rng.choice(self._n_vocab, p=probs))

    def _allows(self, token: int) -> bool:
        data = np.zeros(1, dtype=_TOKEN_DATA)
        data["id"] = token
        self._run_grammar(data)
        return bool(np.isfinite(data["logit"][0]))

    def _apply_grammar(self, logits: Logits) -> None:
        data = np.zeros(self._n_vocab, dtype=_TOKEN_DATA)
        data["id"] = np.arange(self._n_vocab)
        data["logit"] = logits
        self._run_grammar(data)
        logits[:] = data["logit"]

    def _run_grammar(self, data: npt.NDArray[Any]) -> None:
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p),
            size=len(data),
            selected=-1,
            sorted=False,
        )
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))


def top_odds(logits: Logits, k: int) -> list[tuple[int, float]]:
    """The `k` likeliest tokens and their probabilities (vLLM's top logprobs)."""
    top = np.argpartition(logits, -k)[-k:]
    shifted = np.exp((logits - logits.max()).astype(np.float64))
    probs = shifted / shifted.sum()
    return [(int(t), float(probs[t])) for t in top]
