"""A stage worker killed mid-response: the session moves to another worker.

Two stage0 and two stage1 workers (the `synthetic` backends: the serving
path is what is tested), one session replica, one gateway, real Redis.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from stack import LocalStack, Ports, free_port

from tests.support.realtime import MANUAL, RealtimeClient, of_type
from tests.support.speech import spoken
from tests.support.stacks import bound_worker, respawn, started

pytestmark = [pytest.mark.stack, pytest.mark.models]


@pytest.fixture(scope="module")
def workers(request: pytest.FixtureRequest) -> Iterator[LocalStack]:
    ports = Ports.free()
    spare0, spare1 = free_port(), free_port()
    stack = LocalStack(
        ports=ports,
        extra_env={
            "ANTIPHON_BACKEND": "synthetic",
            "ANTIPHON_CAPACITY": "16",
            "ANTIPHON_SYNTHETIC_TOKEN_MS": "150",
            "ANTIPHON_STAGE0_ADDRESSES": f'["127.0.0.1:{ports.stage0}", "127.0.0.1:{spare0}"]',
            "ANTIPHON_STAGE1_ADDRESSES": f'["127.0.0.1:{ports.stage1}", "127.0.0.1:{spare1}"]',
        },
    )
    with started(request, stack):
        stack.spawn_grpc("stage0_b", "stage0", spare0, free_port())
        stack.spawn_grpc("stage1_b", "stage1", spare1, free_port())
        stack.wait_grpc_ready(spare0, "antiphon.v1.Stage0Service")
        stack.wait_grpc_ready(spare1, "antiphon.v1.Stage1Service")
        yield stack


@pytest.mark.parametrize("stage", ["stage0", "stage1"])
async def test_kill_9_of_a_stage_worker_fails_the_response_and_the_next_turn_answers(
    workers: LocalStack, stage: str
) -> None:
    client = await RealtimeClient.connect(f"ws://127.0.0.1:{workers.ports.gateway}/v1/realtime")
    try:
        created = await client.open(**MANUAL)
        await client.append(spoken("Tell me a long story."))
        await client.send("input_audio_buffer.commit")
        await client.send("response.create")
        await client.until(lambda e: e["type"] == "response.output_audio.delta")
        victim = await bound_worker(workers, created["session"]["id"], stage)
        workers.kill(victim)
        cycle = await client.response_cycle(timeout=30)
        done = of_type(cycle, "response.done")[0]["response"]
        # OpenAI's dialect: a failed response names its cause in `status_details.error`.
        assert (done["status"], done["status_details"]) == (
            "failed",
            {"type": "failed", "error": {"type": "server_error", "code": f"{stage}_unavailable"}},
        )
        # The next turn runs on the surviving worker.
        await client.append(spoken("Are you still there?"))
        await client.send("input_audio_buffer.commit")
        await client.send("response.create")
        nxt = await client.response_cycle(timeout=30)
        assert of_type(nxt, "response.done")[0]["response"]["status"] == "completed"
        assert await bound_worker(workers, created["session"]["id"], stage) != victim
    finally:
        await client.close()
        # Bring the worker back for the next case.
        respawn(workers, victim, stage)
