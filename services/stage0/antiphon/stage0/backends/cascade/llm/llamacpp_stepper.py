"""llama.cpp's model and context, and the one thread that steps them.

One context holds a sequence ("slot") per request running at once, and each
step decodes them together in one batch: every answer's next token first,
then prompt chunks in the room left, so a step reads the weights once for
every answer in flight and a long prefill never stalls the answers.

A slot keeps its tokens' KV cache after its request ends. A new request
takes the free slot that shares the longest prefix with its prompt, less a
quarter of what taking it throws away of another's cache (ties: the slot
used longest ago); so a session's turn N prefills only its new text, as
vLLM's prefix cache does for the other engine.

Only the stepper thread touches the context. Requests come in under a
condition variable; what they produce goes back to each caller's event loop
with `call_soon_threadsafe`. An aborted request leaves at the next step.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp
import numpy as np

from antiphon.stage0.backends.cascade.llm.generation import Decoding, GenerationMetrics, LlmOutput
from antiphon.stage0.backends.cascade.llm.llamacpp_sampling import Logits, Sampler, top_odds

log = logging.getLogger(__name__)

# Tokens one step decodes at most.
STEP_TOKENS = 256
_GGML_LOG_ERROR = 4


@dataclass(frozen=True)
class LlamaCppConfig:
    """How the engine is sized: the worker's `llm_*` settings (models.py)."""

    max_model_len: int = 2048
    # Requests running at once (a sequence each), within the KV cache's budget.
    max_num_seqs: int = 16
    kv_cache_gib: float = 1.0
    # Threads of a step that decodes one token per answer (memory-bound), and
    # of one that prefills prompts (compute-bound).
    threads: int = 1
    threads_batch: int = 1


@dataclass
class Request:
    """One generation, from its submission to its last output."""

    id: str
    prompt: list[int]
    temperature: float
    max_tokens: int
    decoding: Decoding
    # GBNF for guided output; None: free.
    grammar: str | None
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue[LlmOutput | BaseException]
    # first_token_odds: the first token's top candidates, instead of text.
    top: int = 0
    aborted: bool = False
    odds: list[tuple[int, float]] = field(default_factory=list)
    # The stepper's: prompt tokens still to decode, then the last token drawn.
    todo: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    submitted: float = field(default_factory=time.perf_counter)
    cached: int = 0
    token_times: list[float] = field(default_factory=list)

    def send(self, item: LlmOutput | BaseException) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, item)

    def done(self, reason: str, text: str = "") -> LlmOutput:
        """The request's last output, with its metrics on the stepper's clock."""
        times = self.token_times
        first = times[0] if times else time.perf_counter()
        decode_ms = (times[-1] - first) * 1000.0 if times else 0.0
        return LlmOutput(
            text=text,
            finished=True,
            finish_reason=reason,
            metrics=GenerationMetrics(
                ttft_ms=(first - self.submitted) * 1000.0,
                tpot_ms=decode_ms / (len(times) - 1) if len(times) > 1 else 0.0,
                itl_ms=[(b - a) * 1000.0 for a, b in itertools.pairwise(times)],
                num_prompt_tokens=len(self.prompt),
                num_generation_tokens=len(self.generated),
                num_cached_tokens=self.cached,
            ),
        )


@dataclass
class _Slot:
    seq: int
    cached: list[int] = field(default_factory=list)
    request: Request | None = None
    sampler: Sampler | None = None
    used: float = 0.0


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _log_errors(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    if level == _GGML_LOG_ERROR and text:
        log.error("llama.cpp: %s", text.decode(errors="replace").rstrip())


# llama.cpp logs every tensor at load: errors only. Kept referenced for as
# long as llama.cpp may call it.
_ERRORS_ONLY = llama_cpp.llama_log_callback(_log_errors)


class Stepper:
    """The model, its context and its stepping thread (started at construction)."""

    def __init__(self, gguf: Path, config: LlamaCppConfig) -> None:
        llama_cpp.llama_backend_init()
        llama_cpp.llama_log_set(_ERRORS_ONLY, ctypes.c_void_p(0))
        mparams = llama_cpp.llama_model_default_params()
        self._model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), mparams)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {gguf}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        seqs = min(config.max_num_seqs, self._seqs_in_budget(config))
        cparams = llama_cpp.llama_context_default_params()
        # Each sequence gets max_model_len cells of its own (not a shared pool).
        cparams.n_ctx = seqs * config.max_model_len
        cparams.kv_unified = False
        cparams.n_seq_max = seqs
        cparams.n_batch = cparams.n_ubatch = STEP_TOKENS
        cparams.n_threads = config.threads
        cparams.n_threads_batch = config.threads_batch
        cparams.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise RuntimeError(f"llama.cpp could not make a context of {seqs} sequences")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(STEP_TOKENS, 0, 1)
        self._slots = [_Slot(seq) for seq in range(seqs)]
        self._incoming: collections.deque[Request] = collections.deque()
        self._waiting: collections.deque[Request] = collections.deque()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="llamacpp-stepper", daemon=True)
        self._thread.start()
        log.info("llama.cpp engine ready", extra={"gguf": str(gguf), "sequences": seqs})

    def _seqs_in_budget(self, config: LlamaCppConfig) -> int:
        """Sequences of `max_model_len` whose f16 KV cache fits `kv_cache_gib`."""
        model = self._model
        heads = int(llama_cpp.llama_model_n_head(model))
        kv_heads = int(llama_cpp.llama_model_n_head_kv(model)) or heads
        head_dim = int(llama_cpp.llama_model_n_embd(model)) // heads
        per_token = 2 * int(llama_cpp.llama_model_n_layer(model)) * kv_heads * head_dim * 2
        budget = int(config.kv_cache_gib * (1 << 30))
        return max(1, budget // (per_token * config.max_model_len))

    @property
    def active(self) -> int:
        """Requests neither finished nor aborted (an aborted one leaves at the next step)."""
        with self._wake:
            requests = [s.request for s in self._slots if s.request is not None]
            requests += [*self._incoming, *self._waiting]
            return sum(1 for r in requests if not r.aborted)

    def submit(self, request: Request) -> None:
        with self._wake:
            self._incoming.append(request)
            self._wake.notify()

    def poke(self) -> None:
        """Wake the stepper to see an abort."""
        with self._wake:
            self._wake.notify()

    def abort(self, request_id: str) -> None:
        """Abort the request of this id, wherever it is."""
        with self._wake:
            running = [s.request for s in self._slots if s.request is not None]
            for request in (*running, *self._incoming, *self._waiting):
                if request.id == request_id:
                    request.aborted = True
            self._wake.notify()

    def piece(self, token: int) -> bytes:
        """The token's text, as bytes (a character may span tokens); special ones: none."""
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        return buf.raw[: max(n, 0)]

    def close(self) -> None:
        """Stop the thread (what runs ends with an error) and free the model."""
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
            self._drop_aborted()
            self._admit()
            try:
                self._step()
            except Exception as exc:  # a failed step fails its requests, not the worker
                log.exception("llama.cpp step failed")
                for slot in self._slots:
                    if slot.request is not None:
                        self._fail(slot, exc)
        stopped = RuntimeError("the LLM engine shut down")
        for slot in self._slots:
            if slot.request is not None:
                self._fail(slot, stopped)
        for request in (*self._waiting, *self._incoming):
            request.send(stopped)

    def _has_work(self) -> bool:
        busy = any(s.request is not None for s in self._slots)
        return bool(self._incoming or self._waiting or busy)

    def _drop_aborted(self) -> None:
        for request in [r for r in self._waiting if r.aborted]:
            self._waiting.remove(request)
            request.send(request.done("abort"))
        for slot in self._slots:
            if slot.request is not None and slot.request.aborted:
                self._finish(slot, "abort")

    def _admit(self) -> None:
        """Each waiting request into the free slot that reuses most of its prompt."""
        while self._waiting:
            free = [s for s in self._slots if s.request is None]
            if not free:
                return
            request = self._waiting.popleft()
            slot = max(free, key=lambda s: self._reuse(s, request.prompt))
            try:
                self._start(slot, request)
            except ValueError as exc:
                slot.request = None
                request.send(exc)

    @staticmethod
    def _reuse(slot: _Slot, prompt: list[int]) -> tuple[int, float]:
        shared = _common_prefix(slot.cached, prompt)
        return (shared - (len(slot.cached) - shared) // 4, -slot.used)

    def _start(self, slot: _Slot, request: Request) -> None:
        slot.sampler = Sampler(
            self._vocab,
            self.n_vocab,
            prompt=request.prompt,
            temperature=request.temperature,
            decoding=request.decoding,
            grammar=request.grammar,
        )
        # The prompt's last token is decoded again at least: its logits give the first token.
        keep = min(_common_prefix(slot.cached, request.prompt), len(request.prompt) - 1)
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq, keep, -1)
        del slot.cached[keep:]
        request.todo = request.prompt[keep:]
        request.cached = keep
        slot.request = request
        slot.used = time.monotonic()

    def _step(self) -> None:
        """One llama_decode over every answer's next token and what prompts fit."""
        batch = self._batch
        n = 0
        sampled: list[tuple[_Slot, int]] = []
        fed: list[tuple[_Slot, list[int]]] = []
        busy = [s for s in self._slots if s.request is not None]
        # Answers (one token to decode) before prompts.
        busy.sort(key=lambda s: len(s.request.todo) if s.request else 0)
        for slot in busy:
            assert slot.request is not None
            todo = slot.request.todo
            chunk = todo[: STEP_TOKENS - n]
            if not chunk:
                break
            for i, token in enumerate(chunk):
                batch.token[n] = token
                batch.pos[n] = len(slot.cached) + i
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = slot.seq
                # Logits only where a token is drawn next: after the prompt's end.
                batch.logits[n] = i == len(todo) - 1
                n += 1
            if len(chunk) == len(todo):
                sampled.append((slot, n - 1))
            fed.append((slot, chunk))
        if not n:
            return
        batch.n_tokens = n
        status = llama_cpp.llama_decode(self._ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")
        for slot, chunk in fed:
            assert slot.request is not None
            slot.cached.extend(chunk)
            del slot.request.todo[: len(chunk)]
        for slot, index in sampled:
            self._next_token(slot, self._logits(index))

    def _logits(self, index: int) -> Logits:
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def _next_token(self, slot: _Slot, logits: Logits) -> None:
        request, sampler = slot.request, slot.sampler
        assert request is not None and sampler is not None
        request.token_times.append(time.perf_counter())
        if request.top:
            request.odds = top_odds(logits, request.top)
            self._finish(slot, "length")
            return
        token = sampler.choose(logits)
        # The end token counts as generated, as vLLM counts it.
        request.generated.append(token)
        if llama_cpp.llama_vocab_is_eog(self._vocab, token):
            self._finish(slot, "stop")
            return
        sampler.accept(token)
        text = sampler.text(self.piece(token))
        if sampler.guard.feed((token,)):
            self._finish(slot, "repetition", text)
        elif len(request.generated) >= request.max_tokens:
            self._finish(slot, "length", text)
        else:
            request.todo.append(token)
            if text:
                request.send(LlmOutput(text=text, finished=False))

    def _release(self, slot: _Slot) -> tuple[Request, Sampler | None]:
        request, sampler = slot.request, slot.sampler
        assert request is not None
        slot.request = slot.sampler = None
        slot.used = time.monotonic()
        if sampler is not None:
            sampler.close()
        return request, sampler

    def _finish(self, slot: _Slot, reason: str, text: str = "") -> None:
        request, sampler = self._release(slot)
        tail = sampler.text(b"", final=True) if sampler is not None else ""
        request.send(request.done(reason, text + tail))

    def _fail(self, slot: _Slot, error: BaseException) -> None:
        request, _ = self._release(slot)
        # What the failed step wrote is unknown: the slot starts clean.
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq, 0, -1)
        slot.cached.clear()
        request.send(error)
