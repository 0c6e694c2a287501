"""Session truth in Redis: admission, the session hash, history and journal.

Every write by a session owner goes through a Lua script that first checks
the owner token, so a replica that lost a session can never overwrite what
its successor wrote. The journal is a Redis Stream whose entry ids are the
events' `server_event_seq` (`<seq>-0`), so replay is a plain XRANGE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from antiphon.session import keys

# KEYS[1] admitted set; ARGV[1] session id, ARGV[2] limit. Idempotent for a
# session already admitted.
_ADMIT = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
return 1
"""

# KEYS[1] owner, KEYS[2] session hash, KEYS[3] journal, KEYS[4] history;
# ARGV[1] token, then field/value pairs. Creates the session, or bumps its
# incarnation when the id is reused (dropping the old incarnation's journal
# and history), and takes ownership.
_OPEN = """
local inc = 0
if redis.call('EXISTS', KEYS[2]) == 1 then
  inc = tonumber(redis.call('HGET', KEYS[2], 'incarnation') or '-1') + 1
end
redis.call('DEL', KEYS[3], KEYS[4])
redis.call('SET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'incarnation', inc, 'seq', 0, 'epoch', 0, 'turn_id', 0)
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
return inc
"""

_FENCE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('NOT_OWNER') end
"""

# KEYS[1] owner, KEYS[2] session hash, KEYS[3] journal; ARGV[1] token,
# ARGV[2] seq, ARGV[3] payload, ARGV[4] max entries. The seq must follow the
# stored one exactly: a gap or a repeat means two writers.
_APPEND_EVENT = (
    _FENCE
    + """
local last = tonumber(redis.call('HGET', KEYS[2], 'seq') or '0')
if tonumber(ARGV[2]) ~= last + 1 then return redis.error_reply('SEQ_CONFLICT') end
redis.call('HSET', KEYS[2], 'seq', ARGV[2])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], ARGV[2] .. '-0', 'e', ARGV[3])
return 1
"""
)

# KEYS[1] owner, KEYS[2] session hash; ARGV[1] token, then field/value pairs.
_SET_FIELDS = (
    _FENCE
    + """
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
return 1
"""
)

# KEYS[1] owner, KEYS[2] history list; ARGV[1] token, ARGV[2] item.
_APPEND_HISTORY = (
    _FENCE
    + """
return redis.call('RPUSH', KEYS[2], ARGV[2])
"""
)


class NotOwnerError(RuntimeError):
    """This replica no longer owns the session; its writes are refused."""


@dataclass(frozen=True)
class Opened:
    incarnation: int


class SessionStore:
    def __init__(self, client: aioredis.Redis, *, journal_max_entries: int = 100_000) -> None:
        # redis-py's return types are unions over its decode modes; this store
        # always runs with bytes responses.
        self._r: Any = client
        self._journal_max = journal_max_entries
        self._admit = client.register_script(_ADMIT)
        self._open = client.register_script(_OPEN)
        self._append_event = client.register_script(_APPEND_EVENT)
        self._set_fields = client.register_script(_SET_FIELDS)
        self._append_history = client.register_script(_APPEND_HISTORY)

    async def ping(self) -> bool:
        try:
            return bool(await self._r.ping())
        except Exception:
            return False

    # --------------------------------------------------------- admission
    async def admit(self, session_id: str, max_sessions: int) -> bool:
        """Atomically take one of `max_sessions` slots for this session."""
        return bool(await self._admit(keys=[keys.ADMITTED], args=[session_id, max_sessions]))

    async def release(self, session_id: str) -> None:
        await self._r.srem(keys.ADMITTED, session_id)

    async def admitted_count(self) -> int:
        return int(await self._r.scard(keys.ADMITTED))

    # ----------------------------------------------------------- session
    async def open(self, session_id: str, token: str, fields: dict[str, bytes | str]) -> Opened:
        args: list[Any] = [token]
        for k, v in fields.items():
            args += [k, v]
        inc = await self._open(
            keys=[
                keys.owner(session_id),
                keys.session(session_id),
                keys.journal(session_id),
                keys.history(session_id),
            ],
            args=args,
        )
        return Opened(incarnation=int(inc))

    async def set_fields(self, session_id: str, token: str, fields: dict[str, bytes | str]) -> None:
        args: list[Any] = [token]
        for k, v in fields.items():
            args += [k, v]
        await self._fenced(
            self._set_fields, [keys.owner(session_id), keys.session(session_id)], args
        )

    async def fields(self, session_id: str) -> dict[bytes, bytes]:
        return dict(await self._r.hgetall(keys.session(session_id)))

    # ----------------------------------------------------------- journal
    async def append_event(self, session_id: str, token: str, seq: int, payload: bytes) -> None:
        await self._fenced(
            self._append_event,
            [keys.owner(session_id), keys.session(session_id), keys.journal(session_id)],
            [token, seq, payload, self._journal_max],
        )

    async def journal_since(self, session_id: str, after_seq: int) -> list[tuple[int, bytes]]:
        entries = await self._r.xrange(keys.journal(session_id), min=f"({after_seq}-0")
        return [(int(eid.split(b"-")[0]), fields[b"e"]) for eid, fields in entries]

    # ----------------------------------------------------------- history
    async def append_history(self, session_id: str, token: str, item: bytes) -> int:
        n = await self._fenced(
            self._append_history, [keys.owner(session_id), keys.history(session_id)], [token, item]
        )
        return int(n)

    async def history(self, session_id: str) -> list[bytes]:
        return list(await self._r.lrange(keys.history(session_id), 0, -1))

    # ------------------------------------------------------------ ending
    async def expire(self, session_id: str, ttl_s: float) -> None:
        """Keep a closed session's journal and history for late readers, then drop them."""
        ms = max(1, int(ttl_s * 1000))
        for key in (keys.session(session_id), keys.journal(session_id), keys.history(session_id)):
            await self._r.pexpire(key, ms)
        await self._r.delete(keys.owner(session_id))

    async def _fenced(self, script: Any, key_list: list[str], args: list[Any]) -> Any:
        try:
            return await script(keys=key_list, args=args)
        except aioredis.ResponseError as exc:
            if "NOT_OWNER" in str(exc) or "SEQ_CONFLICT" in str(exc):
                raise NotOwnerError(str(exc)) from exc
            raise
