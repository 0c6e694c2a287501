"""A pod of several workers of one tier, as `python -m antiphon.<tier>.main`
starts it (stage0's `llm_front_ends`, stage1's `worker_processes`), in its own
process group: what its workers registered, and what is left of it after a signal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis

from antiphon.common.grpcserver import check_ready
from antiphon.common.workers import WorkerInfo, WorkerRegistry
from bench.lib.machine import free_ports

REPO = Path(__file__).resolve().parents[2]


class Pod:
    """`tier`'s main with `count` workers at free ports, registering in `redis_url`."""

    def __init__(
        self,
        tier: str,
        count: int,
        redis_url: str,
        log: Path,
        env: dict[str, str],
        *,
        metrics_ports: int | None = None,
    ) -> None:
        self.tier = tier
        self.count = count
        self.port = free_ports(count)
        # A duplex stepper's metrics follow its front ends': one port more.
        self.metrics_port = free_ports(metrics_ports or count)
        self.redis_url = redis_url
        full = {k: v for k, v in os.environ.items() if k != "ANTIPHON_PROFILE"}
        full.update(
            PYTHONPATH=os.pathsep.join(
                [str(REPO / "services" / "common"), str(REPO / "services" / tier)]
            ),
            ANTIPHON_LISTEN=f"127.0.0.1:{self.port}",
            ANTIPHON_METRICS_PORT=str(self.metrics_port),
            ANTIPHON_REDIS_URL=redis_url,
            ANTIPHON_HEARTBEAT_S="0.5",
            ANTIPHON_SHUTDOWN_GRACE_S="3",
            **env,
        )
        self._log = log.open("wb")
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"antiphon.{tier}.main"],
            env=full,
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{self.port + k}" for k in range(self.count)]

    def tail(self) -> str:
        self._log.flush()
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def group_alive(self) -> list[str]:
        """The processes still in the pod's group (the supervisor, its workers, theirs)."""
        out = subprocess.run(["pgrep", "-g", str(self.proc.pid)], capture_output=True, text=True)
        return out.stdout.split()

    def children(self, command_has: str) -> list[str]:
        """The supervisor's own children whose command line holds `command_has`."""
        out = subprocess.run(
            ["pgrep", "-P", str(self.proc.pid), "-f", command_has], capture_output=True, text=True
        )
        return out.stdout.split()

    def group_left(self, timeout_s: float) -> list[str]:
        """The group's processes still alive after up to `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while (alive := self.group_alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return alive

    async def workers(self) -> list[WorkerInfo]:
        """The pod's own workers listed in its registry (a shared database may
        list other tests' workers of the tier too)."""
        client = aioredis.Redis.from_url(self.redis_url)
        try:
            listed = await WorkerRegistry(client).workers(self.tier)
        finally:
            await client.aclose()
        own = set(self.addresses())
        return [w for w in listed if w.address in own]

    async def listed(self, timeout_s: float) -> list[WorkerInfo]:
        """Once every worker is listed (fails the test when the pod exits first)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.tier} exited ({self.proc.returncode}):\n{self.tail()}")
            listed = await self.workers()
            if len(listed) == self.count:
                return listed
            await asyncio.sleep(0.5)
        pytest.fail(f"{self.count} workers not listed within {timeout_s:.0f}s:\n{self.tail()}")

    async def ready(self, service: str, timeout_s: float = 120) -> None:
        """Once every front end's `service` is ready (fails the test when the
        pod exits or the time runs out first)."""
        deadline = time.monotonic() + timeout_s
        for address in self.addresses():
            async with grpc.aio.insecure_channel(address) as channel:
                while not await check_ready(channel, service):
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        pytest.fail(f"{address} not ready:\n{self.tail()}")
                    await asyncio.sleep(0.2)

    def listening(self, port: int) -> list[str]:
        """The supervisor's spawned children holding the listening socket on
        `port` (a front end's gRPC server)."""
        return [pid for pid in self.children("spawn_main") if listens(int(pid), port)]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._log.close()


def duplex_pod(tier: str, tmp: Path, front_ends: int, env: dict[str, str]) -> Pod:
    """A duplex worker of `tier` (`duplex_front_ends`: `front_ends`), no
    registry; above one front end its stepper's metrics port follows theirs."""
    own = env | {"ANTIPHON_DUPLEX_FRONT_ENDS": str(front_ends)}
    log = tmp / f"{tier}-{front_ends}.log"
    return Pod(tier, front_ends, "", log, own, metrics_ports=front_ends + (front_ends > 1))


@contextlib.contextmanager
def one_and_two(
    tier: str, tmp: Path, env: dict[str, str], service: str
) -> Iterator[tuple[Pod, Pod]]:
    """The same duplex worker twice, ready: one process, and a stepper with
    two front ends."""
    one, two = duplex_pod(tier, tmp, 1, env), duplex_pod(tier, tmp, 2, env)
    try:
        asyncio.run(one.ready(service))
        asyncio.run(two.ready(service))
        yield one, two
    finally:
        one.kill()
        two.kill()


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds the listening socket on `port` (its gRPC server,
    IPv4 mapped into IPv6 as gRPC binds it)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if (target := os.readlink(fd)).startswith("socket:["):
                inodes.add(target[8:-1])
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            listening = fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port
            if listening and fields[9] in inodes:
                return True
    return False


# What both stages' duplex front-end tests check of a pod alike.


def assert_front_ends_hold_no_torch(one: Pod, two: Pod) -> None:
    """`one` (one process) has no child; `two`'s two front ends map gRPC and
    not libtorch: torch loads in the stepper alone."""
    assert one.children("") == []
    front_ends = two.children("spawn_main")
    assert len(front_ends) == 2
    for pid in front_ends:
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert "libtorch" not in maps and "grpc" in maps


def kill_front_end(pod: Pod, index: int) -> None:
    """kill -9 of the front end listening on the pod's port + `index`."""
    (victim,) = pod.listening(pod.port + index)
    os.kill(int(victim), signal.SIGKILL)


async def assert_sigterm_drains(pod: Pod) -> None:
    """SIGTERM: the pod exits 0 and leaves no process of its group behind."""
    pod.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(pod.proc.wait, 60)
    assert code == 0, pod.tail()
    assert await asyncio.to_thread(pod.group_left, 10.0) == [], pod.tail()


async def kill_stepper(pod: Pod, streams: list[asyncio.Task[None]]) -> None:
    """kill -9 of the stepper; returns once `streams` ended and the front ends
    stopped with it."""
    pod.proc.kill()
    # Reaped: a zombie stays in the group.
    await asyncio.to_thread(pod.proc.wait, 10)
    await asyncio.wait_for(asyncio.gather(*streams), 30)
    assert await asyncio.to_thread(pod.group_left, 10.0) == [], pod.tail()
