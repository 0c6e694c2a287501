"""What the benches' command lines share."""

from __future__ import annotations


def ints(text: str) -> list[int]:
    """A comma-separated list of integers, as the level options take ("1,16,64")."""
    return [int(x) for x in text.split(",") if x.strip()]
