"""Databases of the test session's one Redis (tests/conftest.py `redis_url`):
each test module keeps to a database of its own, emptied when it starts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as aioredis


def db_url(redis_url: str, db: int) -> str:
    """`redis_url` pointed at database `db`."""
    return f"{redis_url.rsplit('/', 1)[0]}/{db}"


@asynccontextmanager
async def flushed(redis_url: str, db: int) -> AsyncIterator[aioredis.Redis]:
    """A client of database `db`, emptied first; closed on leaving."""
    client = aioredis.from_url(db_url(redis_url, db))
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()
