"""Percentiles, the one way every benchmark reports them."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def pct(values: Iterable[float], q: float, digits: int = 2) -> float | None:
    """The q-th percentile (numpy's linear interpolation), rounded; None for no values."""
    data = list(values)
    return round(float(np.percentile(data, q)), digits) if data else None
