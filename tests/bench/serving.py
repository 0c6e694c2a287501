"""Real Prometheus registries served over HTTP the way the workers serve theirs,
for the tests of what the benches scrape (`serve` is tests/bench/conftest.py's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from prometheus_client import CollectorRegistry

Serve = Callable[[CollectorRegistry], int]
M = TypeVar("M")


def served(
    serve: Serve, metrics: Callable[[CollectorRegistry], M], count: int
) -> tuple[list[M], list[int]]:
    """`count` workers' metrics (a `Stage0Metrics` each, say), each in a registry of
    its own on a port of its own: the metrics, and their ports."""
    registries = [CollectorRegistry() for _ in range(count)]
    return [metrics(r) for r in registries], [serve(r) for r in registries]
