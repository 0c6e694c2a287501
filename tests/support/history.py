"""A session's conversation as the session service stores it in Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from antiphon.session.state import keys
from antiphon.v1 import common_pb2 as cpb


async def stored_items(redis_url: str, session_id: str) -> list[cpb.Item]:
    """The items of the session's history, in order."""
    r = aioredis.Redis.from_url(redis_url)
    try:
        raw: list[bytes] = await r.lrange(keys.history(session_id), 0, -1)  # type: ignore[assignment]
    finally:
        await r.aclose()
    return [cpb.Item.FromString(item) for item in raw]
