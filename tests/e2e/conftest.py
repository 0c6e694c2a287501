"""Per-test Realtime clients on the session-scoped synthetic stacks.

`client` / `slow_client` speak OpenAI's dialect (`/v1/realtime`, no opt-in:
every frame they receive is checked against the `openai` SDK's models);
`duplex_client` / `slow_duplex_client` the duplex extensions (`?duplex=1`);
`openai_client` is the official `openai` SDK's, on the real-model stack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from openai import AsyncOpenAI
from stack import LocalStack

from tests.support.realtime import RealtimeClient, duplex_url, realtime_url


async def _client(url: str) -> AsyncIterator[RealtimeClient]:
    c = await RealtimeClient.connect(url)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def client(synthetic_stack: LocalStack) -> AsyncIterator[RealtimeClient]:
    async for c in _client(realtime_url(synthetic_stack.ports.gateway)):
        yield c


@pytest.fixture
async def duplex_client(synthetic_stack: LocalStack) -> AsyncIterator[RealtimeClient]:
    async for c in _client(duplex_url(synthetic_stack.ports.gateway)):
        yield c


@pytest.fixture
async def slow_client(slow_synthetic_stack: LocalStack) -> AsyncIterator[RealtimeClient]:
    """A client of the stack whose scripted LLM speaks one word per 300 ms."""
    async for c in _client(realtime_url(slow_synthetic_stack.ports.gateway)):
        yield c


@pytest.fixture
async def slow_duplex_client(slow_synthetic_stack: LocalStack) -> AsyncIterator[RealtimeClient]:
    """A duplex client of the stack whose scripted LLM speaks one word per 300 ms."""
    async for c in _client(duplex_url(slow_synthetic_stack.ports.gateway)):
        yield c


@pytest.fixture
async def openai_client(model_stack: LocalStack) -> AsyncIterator[AsyncOpenAI]:
    """The official SDK, unmodified, pointed at the real-model stack."""
    port = model_stack.ports.gateway
    client = AsyncOpenAI(
        api_key="sk-test",
        base_url=f"http://127.0.0.1:{port}/v1",
        websocket_base_url=f"ws://127.0.0.1:{port}/v1",
    )
    yield client
    await client.close()
