"""A worker's Prometheus samples, read over HTTP, and what a level's two scrapes say."""

from __future__ import annotations

import contextlib
import math
import re
import urllib.request
from collections.abc import Iterable
from typing import Any


def scrape(ports: Iterable[int]) -> dict[str, float]:
    """Samples `name{labels}` -> value, summed over the metrics ports (a worker's front
    ends); a port that does not answer counts nothing."""
    out: dict[str, float] = {}
    for port in ports:
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[name] = out.get(name, 0.0) + float(value)
    return out


def metric_sum(samples: dict[str, float], name: str) -> float:
    """A counter summed over its label sets."""
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


# ------------------------------------------------------------ unlabelled (stage0 cascade)
def histogram_delta(before: dict[str, float], after: dict[str, float], name: str) -> dict[str, Any]:
    """An unlabelled histogram between two scrapes: calls, sum, mean, cumulative buckets."""
    count = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
    total = after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)
    buckets = {}
    prefix = f'{name}_bucket{{le="'
    for key, value in after.items():
        if key.startswith(prefix):
            le = key[len(prefix) : -2]
            buckets[le] = int(value - before.get(key, 0.0))
    return {
        "calls": int(count),
        "sum": total,
        "mean": round(total / count, 2) if count else None,
        "cumulative_buckets": buckets,
    }


def bucket_quantile(delta: dict[str, Any], q: float) -> float | None:
    """The upper bound of the bucket holding a `histogram_delta`'s q-quantile (None: empty)."""
    calls = delta["calls"]
    if not calls:
        return None
    for le, count in sorted(
        delta["cumulative_buckets"].items(), key=lambda kv: float(kv[0].replace("+Inf", "inf"))
    ):
        if count >= q * calls:
            return float(le.replace("+Inf", "inf"))
    return None


def seconds_histogram_ms(
    before: dict[str, float], after: dict[str, float], name: str
) -> dict[str, Any]:
    """A seconds histogram over a level, in ms: its mean and the bucket bounds of its
    p95 and p99 (the loop's lag is sampled through the whole level, its ask phases
    a few per cent of it)."""
    delta = histogram_delta(before, after, name)
    out: dict[str, Any] = {"count": delta["calls"], "mean": None}
    if delta["calls"]:
        out["mean"] = round(delta["sum"] / delta["calls"] * 1000, 2)
    for q in (95, 99):
        bound = bucket_quantile(delta, q / 100)
        out[f"p{q}_at_most"] = bound * 1000 if bound is not None else None
    return out


# ------------------------------------------------------------ labelled, interpolated (duplex)
def histogram_buckets(samples: dict[str, float], name: str) -> dict[float, float]:
    """Cumulative bucket counts by upper bound, summed over the other labels."""
    out: dict[float, float] = {}
    for key, value in samples.items():
        if key.startswith(name + "_bucket{") and (m := re.search(r'le="([^"]+)"', key)):
            le = float(m.group(1).replace("+Inf", "inf"))
            out[le] = out.get(le, 0.0) + value
    return out


def histogram_quantile(buckets: dict[float, float], q: float) -> float | None:
    """Prometheus's histogram_quantile: linear within the bucket that holds it; the
    largest finite bound when it falls in +Inf."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower
            inside = count - below
            return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = le, count
    return lower


def step_window(before: dict[str, float], after: dict[str, float], name: str) -> dict[str, Any]:
    """A seconds histogram over the window, in ms: count, mean, p50, p99."""
    b0, b1 = histogram_buckets(before, name), histogram_buckets(after, name)
    delta = {le: b1[le] - b0.get(le, 0.0) for le in b1}
    count = metric_sum(after, name + "_count") - metric_sum(before, name + "_count")
    total = metric_sum(after, name + "_sum") - metric_sum(before, name + "_sum")
    out: dict[str, Any] = {"count": int(count), "mean": None, "p50": None, "p99": None}
    if count:
        out["mean"] = round(total / count * 1000, 2)
    for q in (50, 99):
        v = histogram_quantile(delta, q / 100)
        out[f"p{q}"] = round(v * 1000, 2) if v is not None else None
    return out
