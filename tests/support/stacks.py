"""Starting a local stack from a fixture: marked, started, always stopped."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from stack import LocalStack, free_port

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


# ------------------------------------------------- stacks with a spare worker
# A stack whose stage0 and stage1 each have a second worker ("stage0_b",
# "stage1_b", spawned by the test's fixture) on another port.


async def bound_worker(stack: LocalStack, session_id: str, stage: str) -> str:
    """The process name of the worker of `stage` a session is bound to."""
    import redis.asyncio as aioredis

    from antiphon.session.state import keys

    r = aioredis.Redis.from_url(stack.redis_url)
    try:
        raw: bytes | None = await r.hget(keys.session(session_id), stage)  # type: ignore[assignment]
    finally:
        await r.aclose()
    own = stack.ports.stage0 if stage == "stage0" else stack.ports.stage1
    return stage if (raw or b"").decode().endswith(f":{own}") else f"{stage}_b"


def respawn(stack: LocalStack, name: str, stage: str, spare_port: int = 0) -> None:
    """Bring back a killed worker of `stage` on its port. A killed spare comes
    back only given its port (`spare_port`); without it, it stays gone and the
    first serves on."""
    if name == stage:
        port = stack.ports.stage0 if stage == "stage0" else stack.ports.stage1
    elif spare_port:
        port = spare_port
    else:
        return
    stack.spawn_grpc(name, stage, port, free_port())
    stack.wait_grpc_ready(port, f"antiphon.v1.{stage.capitalize()}Service")
