"""Several stage1 workers in one pod (`worker_processes`, processes.py).

The layout's refusals are checked on their own; the real thing is
`python -m antiphon.stage1.main` with two workers on the Piper voice: each
registers itself at its own address and speaks on its own Bind stream;
SIGTERM drains both and the pod exits 0, and a worker that dies takes the
pod down with it (non-zero), leaving nothing behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from antiphon.stage1.processes import check
from antiphon.stage1.settings import Stage1Settings
from antiphon.v1 import stage_pb2_grpc
from tests.stage1.serving import answer
from tests.support.pod import Pod
from tests.support.redis_dbs import db_url

WORKERS = 2
DB = 16  # this module's own database on the shared test Redis


def test_a_layout_that_cannot_serve_is_refused_before_anything_starts() -> None:
    with pytest.raises(SystemExit, match="mimi"):
        check(Stage1Settings(backend="mimi", worker_processes=2, capacity=8))
    with pytest.raises(SystemExit, match="capacity 1"):
        check(Stage1Settings(worker_processes=2, capacity=1))
    with pytest.raises(ValueError, match="worker_processes"):
        Stage1Settings(worker_processes=0)
    check(Stage1Settings(worker_processes=2, capacity=2))


@pytest.fixture
def pod(redis_url: str, tmp_path: Path) -> Iterator[Pod]:
    started = Pod(
        "stage1",
        WORKERS,
        db_url(redis_url, DB),
        tmp_path / "stage1.log",
        {"ANTIPHON_WORKER_PROCESSES": str(WORKERS), "ANTIPHON_CAPACITY": str(2 * WORKERS)},
    )
    try:
        yield started
    finally:
        started.kill()


async def _spoken(address: str, session: str, text: str) -> np.ndarray:
    async with grpc.aio.insecure_channel(address) as channel:
        chunks = await answer(stage_pb2_grpc.Stage1ServiceStub(channel), session, text)
    assert "".join(c.text for c in chunks) == text
    return np.frombuffer(b"".join(c.pcm16 for c in chunks), np.int16)


@pytest.mark.models
async def test_two_workers_register_speak_and_drain_on_sigterm(pod: Pod) -> None:
    listed = await pod.listed(timeout_s=120)
    assert sorted(w.address for w in listed) == pod.addresses()
    assert [w.capacity for w in listed] == [2, 2]
    texts = ["The first worker speaks.", "And so does the second one."]
    voiced = await asyncio.gather(
        *(
            _spoken(a, f"w{k}", t)
            for k, (a, t) in enumerate(zip(pod.addresses(), texts, strict=True))
        )
    )
    for pcm in voiced:
        assert len(pcm) > 16000 * 0.8 and np.abs(pcm).max() > 1000  # speech, not silence

    pod.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(pod.proc.wait, 60)
    assert code == 0, pod.tail()
    assert await pod.workers() == []
    assert await asyncio.to_thread(pod.group_left, 10.0) == [], pod.tail()


@pytest.mark.models
async def test_a_worker_that_dies_stops_the_pod(pod: Pod) -> None:
    await pod.listed(timeout_s=120)
    # The supervisor's spawned workers (not multiprocessing's resource tracker).
    workers = await asyncio.to_thread(pod.children, "spawn_main")
    assert len(workers) == WORKERS, workers
    os.kill(int(workers[0]), signal.SIGKILL)
    code = await asyncio.to_thread(pod.proc.wait, 60)
    assert code != 0, pod.tail()
    assert "the pod stops with it" in pod.tail()
    # The other worker drained: it left the registry and the group is gone.
    assert await asyncio.to_thread(pod.group_left, 10.0) == [], pod.tail()
    # The drained one left the registry; the killed one's entry expires.
    assert len(await pod.workers()) <= 1
