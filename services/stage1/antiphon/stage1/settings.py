"""Stage1 worker configuration."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from antiphon.common.audio_formats import PCM_OUTPUT_RATE
from antiphon.common.workers import WorkerSettings


class Stage1Settings(WorkerSettings):
    profile_section: ClassVar[str] = "stage1"

    listen: str = "0.0.0.0:50071"
    metrics_port: int = 9121
    # A name in the backend registry (backends/__init__.py): "piper" (real
    # voice), "synthetic" (a tone; load and fault tests only), "mimi"
    # (decodes a Moshi-architecture model's audio tokens: duplex only) or
    # "nemotron" (Nemotron VoiceChat's EAR-TTS and codec: duplex only).
    backend: str = "piper"
    # One thread: two under contention on a shared 2-core box ran far slower.
    tts_threads: int = 1
    # What runs the Piper voice. `onnxruntime`: on the CPU, one sentence at a
    # time. `torch` (common/onnx/torch_graph.py): the same graph in torch on `tts_device`,
    # the sentences of every session of the worker in shared batches
    # (backends/piper/voice_batch.py); for a GPU (on a CPU it is slower than onnxruntime).
    tts_engine: Literal["onnxruntime", "torch"] = "onnxruntime"
    # torch's device: "cpu", "cuda" or "cuda:N".
    tts_device: str = "cpu"
    # Sentences in one `torch` batch at most; as many clauses are synthesised
    # at once (each waits for its batch), where `onnxruntime` takes one. On an
    # H200, 128 clauses at once were voiced in 250 ms at 128, 451 at 64
    # (docs/performance.md, "Piper on one GPU").
    tts_max_batch: int = Field(default=128, ge=1)
    # `torch` on a CUDA device: replay the voice's network as CUDA graphs
    # (backends/piper/voice_graphs.py), one launch per part of a batch instead of 2,755.
    tts_cuda_graphs: bool = False
    # Workers in this pod, each a whole stage1 worker at `listen`'s port + i
    # with its share of `capacity`, sharing the device (processes.py): one
    # process's batch loop is bound by its interpreter, not by a GPU.
    worker_processes: int = Field(default=1, ge=1)
    # The rate the voice speaks; synthesis resamples to the rate a session asks for.
    output_rate: int = PCM_OUTPUT_RATE
    # A response's first clause may end at a word boundary after this many
    # words, so speech starts before the LLM finishes its first sentence
    # (0: cut only at punctuation).
    first_clause_words: int = 2
    # When the listener will run out of a response's audio within this many
    # ms and no clause is ready, the words already written are spoken
    # (speech/playout.py): no silence at a join while the LLM writes at about the
    # pace of speech. 0: clauses only.
    underrun_guard_ms: int = 400
    # `synthetic` backend: audio length per character and compute cost ratio.
    synthetic_ms_per_char: float = 60.0
    synthetic_compute_ratio: float = 0.0
    # Sessions this worker serves in real time (measured by `make bench`);
    # the `mimi` and `nemotron` backends step a batch of this many rows.
    capacity: int = 4
    # `mimi` backend. The model whose Mimi decoder runs here: a local checkpoint
    # folder, random:7b or random:tiny (common/moshi_checkpoint.py); no default,
    # since stage0 must serve the same one. `nemotron`: the Nemotron VoiceChat
    # checkpoint folder or random:tiny (common/nemotron/checkpoint.py), whose
    # EAR-TTS and codec run here. `minicpmo`: the MiniCPM-o 4.5 folder or
    # random:4.5 or random:tiny (common/minicpmo/checkpoint.py), whose talker and token2wav
    # run here. The duplex_* settings below serve all three.
    duplex_checkpoint: str = ""
    # "auto": the GPU when there is one (the decoder is batched for it), else the CPU.
    duplex_device: str = "auto"
    # Torch's intra-op threads: the workers share few cores, and one decode
    # step is too small to gain from more.
    duplex_threads: int = 1
    # How long a step waits for the other sessions' frames after the first:
    # stage0 sends one lockstep burst every 80 ms, spread over a few ms.
    duplex_gather_ms: float = 5.0
    # `mimi` backend: processes carrying the sessions' gRPC streams, on one
    # stepper process that owns the decoder and its batch
    # (duplex_front_ends.py; stage0's setting of the same name splits its
    # worker the same way); 1 is one process.
    duplex_front_ends: int = Field(default=1, ge=1)
    # moshi's torch.compile of a few functions costs some 30 s at the first
    # call on a CPU and gains little for a decoder this small: off unless asked.
    duplex_compile: bool = False
    # `minicpmo` backend: the talker's sampling temperature (unset: the
    # published 0.8; 0 decodes greedily), and a seed that makes each turn's
    # sampling the same for the same text (unset: a fresh one a turn).
    duplex_temperature: float | None = Field(default=None, ge=0)
    duplex_seed: int | None = None
    # `minicpmo` backend: most units (one per speaking session) spoken in one
    # batch; each holds its turn's caches on the device while it runs.
    duplex_batch: int = Field(default=32, ge=1)
    # `minicpmo` backend: token2wav's solver caches, nearly all of a speaking
    # session's memory (some 0.6 GB in float32). "auto": float16 on a GPU,
    # where they bound how many sessions fit; float32 on a CPU, which is the
    # package's own token2wav sample for sample.
    duplex_voice_cache: Literal["auto", "float32", "float16"] = "auto"
    # `minicpmo` backend: the talker makes one batch's codes while token2wav
    # voices the batch before (voice.py says when one batch at a time is faster).
    duplex_voice_pipeline: bool = True

    @model_validator(mode="after")
    def _graphs_need_cuda(self) -> Stage1Settings:
        if self.tts_cuda_graphs and (
            self.tts_engine != "torch" or not self.tts_device.startswith("cuda")
        ):
            raise ValueError("tts_cuda_graphs needs tts_engine torch on a cuda tts_device")
        return self
