"""Per-test Realtime clients on the session-scoped synthetic stacks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from stack import LocalStack

from tests.support.realtime import RealtimeClient, realtime_url


@pytest.fixture
async def client(synthetic_stack: LocalStack) -> AsyncIterator[RealtimeClient]:
    c = await RealtimeClient.connect(realtime_url(synthetic_stack.ports.gateway))
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def slow_client(slow_synthetic_stack: LocalStack) -> AsyncIterator[RealtimeClient]:
    """A client of the stack whose scripted LLM speaks one word per 300 ms."""
    c = await RealtimeClient.connect(realtime_url(slow_synthetic_stack.ports.gateway))
    try:
        yield c
    finally:
        await c.close()
