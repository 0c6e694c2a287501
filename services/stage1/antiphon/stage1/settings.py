"""Stage1 worker configuration."""

from __future__ import annotations

from typing import ClassVar

from antiphon.common.workers import WorkerSettings


class Stage1Settings(WorkerSettings):
    profile_section: ClassVar[str] = "stage1"

    listen: str = "0.0.0.0:50071"
    metrics_port: int = 9121
    # "piper" (real voice) or "synthetic" (a tone; load and fault tests only).
    backend: str = "piper"
    # One thread: two under contention on a shared 2-core box ran far slower.
    tts_threads: int = 1
    output_rate: int = 24000
    # A response's first clause may end at a word boundary after this many
    # words, so speech starts before the LLM finishes its first sentence
    # (0: cut only at punctuation).
    first_clause_words: int = 4
    # `synthetic` backend: audio length per character and compute cost ratio.
    synthetic_ms_per_char: float = 60.0
    synthetic_compute_ratio: float = 0.0
    # Sessions this worker serves in real time (measured by `make bench`).
    capacity: int = 4
