"""Starting a local stack from a fixture: marked, started, always stopped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from stack import LocalStack

from tests.support import tiers


@contextlib.contextmanager
def started(
    request: pytest.FixtureRequest, stack: LocalStack, timeout_s: float = 180.0
) -> Iterator[LocalStack]:
    """`stack` running for the tests asking for `request`'s fixture (each must be
    marked `stack`: `tiers.require`), stopped after the last of them."""
    tiers.require(request, tiers.STACK, "starts a local stack")
    try:
        # Inside the try: a service that fails to start does not leave the others running.
        stack.start(timeout_s=timeout_s)
        yield stack
    finally:
        stack.stop()
