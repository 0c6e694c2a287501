"""Per-test Realtime clients on the session-scoped synthetic stacks; the
duplex model's stack, started once for the modules that talk to it.

`client` / `slow_client` speak OpenAI's dialect (`/v1/realtime`, no opt-in:
every frame they receive is checked against the `openai` SDK's models);
`duplex_client` / `slow_duplex_client` the duplex extensions (`?duplex=1`);
`openai_client` is the official `openai` SDK's, on the real-model stack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from openai import AsyncOpenAI
from stack import REPO, LocalStack, Ports, free_port

from tests.support.realtime import RealtimeClient, duplex_url, realtime_url
from tests.support.stacks import started

DUPLEX_PROFILE = REPO / "deploy" / "profiles" / "duplex.yaml"


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


@pytest.fixture(scope="session")
def spare_ports() -> dict[str, int]:
    """The ports of each stage's second worker, by process name."""
    return {"stage0_b": free_port(), "stage1_b": free_port()}


@pytest.fixture(scope="session")
def duplex_stack(
    request: pytest.FixtureRequest, spare_ports: dict[str, int]
) -> Iterator[LocalStack]:
    """The Moshi architecture's tiny random configuration behind the whole stack,
    with a second worker of each stage (`spare_ports`) to fail over to."""
    ports = Ports.free()
    spare0, spare1 = spare_ports["stage0_b"], spare_ports["stage1_b"]
    stack = LocalStack(
        ports=ports,
        profile=DUPLEX_PROFILE,
        extra_env={
            # Both stages read it: stage0 builds the encoder and LM, stage1 the decoder.
            "ANTIPHON_DUPLEX_CHECKPOINT": "random:tiny",
            # Sampled (greedy random weights settle on one token): the model
            # talks, pads and goes quiet by itself.
            "ANTIPHON_DUPLEX_TEMPERATURE": "1.0",
            "ANTIPHON_DUPLEX_TEXT_TEMPERATURE": "1.0",
            "ANTIPHON_DUPLEX_QUIET_FRAMES": "2",
            "ANTIPHON_DUPLEX_SEED": "7",
            "ANTIPHON_CAPACITY": "3",
            "ANTIPHON_MAX_SESSIONS": "4",
            "ANTIPHON_DISCONNECT_GRACE_S": "10",
            "ANTIPHON_STAGE0_ADDRESSES": f'["127.0.0.1:{ports.stage0}", "127.0.0.1:{spare0}"]',
            "ANTIPHON_STAGE1_ADDRESSES": f'["127.0.0.1:{ports.stage1}", "127.0.0.1:{spare1}"]',
        },
    )
    with started(request, stack, timeout_s=180):
        stack.spawn_grpc("stage0_b", "stage0", spare0, free_port())
        stack.spawn_grpc("stage1_b", "stage1", spare1, free_port())
        stack.wait_grpc_ready(spare0, "antiphon.v1.Stage0Service")
        stack.wait_grpc_ready(spare1, "antiphon.v1.Stage1Service")
        yield stack
