"""Stage1 worker configuration."""

from __future__ import annotations

from typing import ClassVar

from antiphon.common.config import ServiceSettings


class Stage1Settings(ServiceSettings):
    profile_section: ClassVar[str] = "stage1"

    listen: str = "0.0.0.0:50071"
    metrics_port: int = 9121
    backend: str = "piper"
    # One thread: two under contention on a shared 2-core box ran far slower.
    tts_threads: int = 1
    output_rate: int = 24000
    # Sessions this worker serves in real time (measured by `make bench`).
    capacity: int = 4
