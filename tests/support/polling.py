"""Waiting for a running system to reach a state, and reading Redis's clock.

A timeout here only guards against a hang: how soon something happens is
measured by `make bench`, not asserted in a test. A claim about expiry is
checked on Redis's own clock (entries are scored by it), not on the test's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 30.0) -> None:
    """Until `check` holds (TimeoutError after `timeout_s`: a hang)."""
    async with asyncio.timeout(timeout_s):
        while True:
            if await check():
                return
            await asyncio.sleep(0.05)


async def redis_now_ms(client: aioredis.Redis) -> float:
    """The Redis server's clock, in milliseconds."""
    seconds, micros = await client.time()
    return seconds * 1000 + micros / 1000
