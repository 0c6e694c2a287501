"""Several stage0 workers on one vLLM engine core (`llm_front_ends`, front_ends.py).

The layout's arithmetic is checked on its own; the real thing is a worker
process with two front ends on the default model: each registers itself in
Redis at its own address, answers on its own Bind stream from the one engine,
and SIGTERM drains both and stops the engine core, leaving nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis

from antiphon.common.workers import WorkerInfo, WorkerRegistry
from antiphon.stage0.assets import Stage0Assets
from antiphon.stage0.front_ends import check, front_end_settings
from antiphon.stage0.settings import Stage0Settings
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import stage_pb2 as pb
from antiphon.v1 import stage_pb2_grpc
from bench.lib.machine import free_ports

REPO = Path(__file__).resolve().parents[2]
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


class Pod:
    """`python -m antiphon.stage0.main` with `FRONT_ENDS` front ends, in its own group."""

    def __init__(self, redis_url: str, model_cache: Path, log: Path) -> None:
        self.port = free_ports(FRONT_ENDS)
        self.metrics_port = free_ports(FRONT_ENDS)
        self.redis_url = redis_url
        env = {k: v for k, v in os.environ.items() if k != "ANTIPHON_PROFILE"}
        env.update(
            PYTHONPATH=os.pathsep.join(
                [str(REPO / "services" / "common"), str(REPO / "services" / "stage0")]
            ),
            ANTIPHON_LLM_FRONT_ENDS=str(FRONT_ENDS),
            ANTIPHON_LISTEN=f"127.0.0.1:{self.port}",
            ANTIPHON_METRICS_PORT=str(self.metrics_port),
            ANTIPHON_REDIS_URL=redis_url,
            ANTIPHON_HEARTBEAT_S="0.5",
            ANTIPHON_CAPACITY=str(2 * FRONT_ENDS),
            ANTIPHON_SHUTDOWN_GRACE_S="3",
            ANTIPHON_MODEL_CACHE=str(model_cache),
        )
        self._log = log.open("wb")
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "antiphon.stage0.main"],
            env=env,
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.port + k}" for k in range(FRONT_ENDS)]

    def tail(self) -> str:
        self._log.flush()
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def group_alive(self) -> list[str]:
        """The processes still in the pod's group (the supervisor, front ends, engine core)."""
        out = subprocess.run(["pgrep", "-g", str(self.proc.pid)], capture_output=True, text=True)
        return out.stdout.split()

    def group_left(self, timeout_s: float) -> list[str]:
        """The group's processes still alive after up to `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while (alive := self.group_alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return alive

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()


async def _workers(redis_url: str) -> list[WorkerInfo]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return await WorkerRegistry(client).workers("stage0")
    finally:
        await client.aclose()


async def _listed(pod: Pod, timeout_s: float) -> list[WorkerInfo]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pod.proc.poll() is not None:
            pytest.fail(f"stage0 exited ({pod.proc.returncode}):\n{pod.tail()}")
        listed = await _workers(pod.redis_url)
        if len(listed) == FRONT_ENDS:
            return listed
        await asyncio.sleep(1.0)
    pytest.fail(f"{FRONT_ENDS} front ends not listed within {timeout_s:.0f}s:\n{pod.tail()}")


@pytest.fixture(scope="module")
def pod(
    assets: Stage0Assets,
    redis_url: str,
    model_cache: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pod]:
    # Its own database: other tests' stacks register stage0 workers too.
    url = f"{redis_url.rsplit('/', 1)[0]}/9"
    started = Pod(url, model_cache, tmp_path_factory.mktemp("front-ends") / "stage0.log")
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
    listed = await _listed(pod, timeout_s=600)
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
    assert await _workers(pod.redis_url) == []
    # The supervisor waited for its children; what is left of the group (vLLM's
    # resource tracker, a second behind) must be gone within seconds.
    assert await asyncio.to_thread(pod.group_left, 10.0) == [], pod.tail()
