"""Several stage0 workers on one vLLM engine core (`llm_front_ends`, front_ends.py).

The layout's arithmetic is checked on its own; the real thing is a worker
process with two front ends on the default model: each registers itself in
Redis at its own address, answers on its own Bind stream from the one engine,
and SIGTERM drains both and stops the engine core, leaving nothing behind.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from antiphon.stage0.assets import Stage0Assets
from antiphon.stage0.front_ends import check, front_end_settings
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from tests.support.pod import Pod
from tests.support.redis_dbs import db_url

FRONT_ENDS = 2


def test_each_front_end_listens_and_reports_one_port_further_and_takes_its_share() -> None:
    settings = Stage0Settings(
        listen="0.0.0.0:50061",
        metrics_port=9111,
        advertise_address="10.0.0.7:50061",
        capacity=10,
        llm_front_ends=3,
    )
    own = [front_end_settings(settings, i) for i in range(3)]
    assert [s.listen for s in own] == ["0.0.0.0:50061", "0.0.0.0:50062", "0.0.0.0:50063"]
    assert [s.metrics_port for s in own] == [9111, 9112, 9113]
    assert [s.advertise_address for s in own] == [
        "10.0.0.7:50061",
        "10.0.0.7:50062",
        "10.0.0.7:50063",
    ]
    # The pod's capacity, split: no session gained or lost.
    assert [s.capacity for s in own] == [4, 3, 3]
    # Unset, each front end still advertises its own port (host resolved there).
    bare = front_end_settings(Stage0Settings(listen="127.0.0.1:7000", llm_front_ends=2), 1)
    assert bare.advertise_address == ""
    assert bare.advertised() == "127.0.0.1:7001"


def test_a_layout_that_cannot_serve_is_refused_before_anything_starts() -> None:
    with pytest.raises(SystemExit, match="synthetic"):
        check(Stage0Settings(backend="synthetic", llm_front_ends=2, capacity=8))
    with pytest.raises(SystemExit, match="capacity 1"):
        check(Stage0Settings(llm_front_ends=2, capacity=1))
    with pytest.raises(ValueError, match="llm_front_ends"):
        Stage0Settings(llm_front_ends=0)
    check(Stage0Settings(llm_front_ends=2, capacity=2))


@pytest.fixture(scope="module")
def pod(
    assets: Stage0Assets,
    redis_url: str,
    model_cache: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pod]:
    # Its own database: other tests' stacks register stage0 workers too.
    started = Pod(
        "stage0",
        FRONT_ENDS,
        db_url(redis_url, 9),
        tmp_path_factory.mktemp("front-ends") / "stage0.log",
        {
            "ANTIPHON_LLM_FRONT_ENDS": str(FRONT_ENDS),
            "ANTIPHON_CAPACITY": str(2 * FRONT_ENDS),
            "ANTIPHON_MODEL_CACHE": str(model_cache),
        },
    )
    try:
        yield started
    finally:
        started.kill()


async def _answer(address: str, session_id: str) -> tuple[str, pb.GenerationDone]:
    """One Generate on a Bind stream of `address`: the text and its done."""
    requests: asyncio.Queue[pb.Stage0Request | None] = asyncio.Queue()

    async def outgoing() -> AsyncIterator[pb.Stage0Request]:
        while (req := await requests.get()) is not None:
            yield req

    requests.put_nowait(
        pb.Stage0Request(
            open=pb.Stage0Open(session_id=session_id, lane=pb.LANE_MANUAL, skip_vad=True)
        )
    )
    requests.put_nowait(
        pb.Stage0Request(
            generate=pb.Generate(
                response_id="r1",
                messages=[cpb.ChatMessage(role="user", content="What is the capital of France?")],
                temperature=0.0,
                max_output_tokens=12,
            )
        )
    )
    text: list[str] = []
    async with grpc.aio.insecure_channel(address) as channel:
        call = stage_pb2_grpc.Stage0ServiceStub(channel).Bind(outgoing())
        async for event in call:
            kind = event.WhichOneof("kind")
            if kind == "delta":
                text.append(event.delta.text)
            elif kind == "error":
                pytest.fail(f"{address}: {event.error.code}: {event.error.message}")
            elif kind == "done":
                requests.put_nowait(None)
                return "".join(text), event.done
    pytest.fail(f"{address}: the stream ended without a done")


@pytest.mark.models
async def test_two_front_ends_register_answer_from_one_engine_and_drain_on_sigterm(
    pod: Pod,
) -> None:
    listed = await pod.listed(timeout_s=600)
    assert sorted(w.address for w in listed) == pod.addresses()
    assert [w.capacity for w in listed] == [2, 2]
    # Both at once: each front end's own loop, the one engine core's batch.
    answers = await asyncio.wait_for(
        asyncio.gather(*(_answer(a, f"fe-{k}") for k, a in enumerate(pod.addresses()))), 300
    )
    for text, done in answers:
        assert done.finish_reason in ("stop", "length")
        assert done.metrics.num_generation_tokens >= 1
        assert "Paris" in text, text
    # The engine core is one process: the supervisor, two front ends and it.
    assert len(pod.group_alive()) >= 1 + FRONT_ENDS + 1

    pod.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(pod.proc.wait, 60)
    assert code == 0, pod.tail()
    assert await pod.workers() == []
    # The supervisor waited for its children; what is left of the group (vLLM's
    # resource tracker, a second behind) must be gone within seconds.
    assert await asyncio.to_thread(pod.group_left, 10.0) == [], pod.tail()
