"""Session truth in Redis: admission, the session hash, history and journal.

Every write by a session owner goes through a Lua script that first checks
the owner token, so a replica that lost a session can never overwrite what
its successor wrote. The journal is a Redis Stream whose entry ids are the
events' `server_event_seq` (`<seq>-0`), so replay is a plain XRANGE.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from antiphon.session.state import keys

T = TypeVar("T")

# KEYS[1] admitted set, KEYS[2] owner; ARGV[1] session id, ARGV[2] limit,
# ARGV[3] the opener's token, ARGV[4] lease ms. Idempotent for a session
# already admitted. A new slot comes with its opener's lease: until the
# session exists, any replica's reaper would otherwise see an admitted id
# with no owner and free its slot, and the limit would leak under load.
_ADMIT = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4], 'NX')
return 1
"""

# KEYS[1] owner, KEYS[2] session hash, KEYS[3] journal, KEYS[4] history,
# KEYS[5] ops; ARGV[1] token, ARGV[2] lease ms, then field/value pairs.
# Creates the session, or bumps its incarnation when the id is reused
# (dropping the old incarnation's journal, history and op ids), and takes
# ownership with a lease.
_OPEN = """
local inc = 0
if redis.call('EXISTS', KEYS[2]) == 1 then
  inc = tonumber(redis.call('HGET', KEYS[2], 'incarnation') or '-1') + 1
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2], 'incarnation', inc, 'seq', 0, 'epoch', 0, 'turn_id', 0,
           'journal_bytes', 0, 'journal_first', 1)
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
return inc
"""

# KEYS[1] owner, KEYS[2] session hash; ARGV[1] token, ARGV[2] lease ms,
# ARGV[3] now ms. Extends the lease only while no other owner holds it: a
# lease that lapsed with no successor (Redis was down for longer than the
# lease) is taken back, since only a successor's token fences this owner out.
_REFRESH = """
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[2], 'state') ~= 'open' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2], 'alive_ms', ARGV[3])
return 1
"""

# KEYS[1] owner, KEYS[2] session hash; ARGV[1] new token, ARGV[2] lease ms.
# A resume on another replica takes the session from its owner, alive or
# not; the old owner's next fenced write fails and it stands down.
_TAKE_OVER = """
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
if redis.call('HGET', KEYS[2], 'state') ~= 'open' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# Every owner write starts here. KEYS[1] owner, KEYS[2] session hash;
# ARGV[1] token, ARGV[2] lease ms. Only a successor's token fences an owner
# out: a lease that lapsed with nobody taking it (Redis paused or away for
# longer than the lease) is taken back, while the session is still open.
_FENCE = """
local owner = redis.call('GET', KEYS[1])
if owner ~= ARGV[1] then
  if owner or redis.call('HGET', KEYS[2], 'state') ~= 'open' then
    return redis.error_reply('NOT_OWNER')
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
"""

# KEYS[3] journal; ARGV[3] seq, ARGV[4] payload, ARGV[5] now ms, ARGV[6] max
# journal bytes. The seq must follow the stored one exactly: a gap or a
# repeat means two writers. The same event again (a retry after a lost
# reply) is no repeat. Past the byte budget the oldest events go, and a
# resume that needs them is told `journal_overflow`.
_APPEND_EVENT = (
    _FENCE
    + """
local seq = tonumber(ARGV[3])
local last = tonumber(redis.call('HGET', KEYS[2], 'seq') or '0')
if seq <= last then
  local same = redis.call('XRANGE', KEYS[3], seq .. '-0', seq .. '-0')[1]
  if same and same[2][2] == ARGV[4] then return 1 end
end
if seq ~= last + 1 then return redis.error_reply('SEQ_CONFLICT') end
redis.call('XADD', KEYS[3], seq .. '-0', 'e', ARGV[4], 't', ARGV[5])
local bytes = redis.call('HINCRBY', KEYS[2], 'journal_bytes', string.len(ARGV[4]))
redis.call('HSET', KEYS[2], 'seq', seq)
local budget = tonumber(ARGV[6])
while bytes > budget do
  local oldest = redis.call('XRANGE', KEYS[3], '-', '+', 'COUNT', 1)[1]
  if oldest == nil then break end
  bytes = redis.call('HINCRBY', KEYS[2], 'journal_bytes', -string.len(oldest[2][2]))
  redis.call('XDEL', KEYS[3], oldest[1])
  local gone = tonumber(string.match(oldest[1], '^(%d+)'))
  redis.call('HSET', KEYS[2], 'journal_first', gone + 1, 'overflowed', 1)
end
return 1
"""
)

# KEYS[3] journal; ARGV[3] acked seq. Drops every event the client has acknowledged.
_TRIM_ACKED = (
    _FENCE
    + """
local first = tonumber(redis.call('HGET', KEYS[2], 'journal_first') or '1')
local upto = tonumber(ARGV[3])
if upto < first then return 0 end
local gone = redis.call('XRANGE', KEYS[3], '-', upto .. '-0')
local freed = 0
for _, e in ipairs(gone) do freed = freed + string.len(e[2][2]) end
redis.call('XTRIM', KEYS[3], 'MINID', (upto + 1) .. '-0')
redis.call('HINCRBY', KEYS[2], 'journal_bytes', -freed)
redis.call('HSET', KEYS[2], 'journal_first', upto + 1)
return #gone
"""
)

# KEYS[3] ops zset; ARGV[3] operation id, ARGV[4] cache size.
# 1 = first time, 0 = duplicate.
_RECORD_OP = (
    _FENCE
    + """
local n = redis.call('HINCRBY', KEYS[2], 'ops_counter', 1)
if redis.call('ZADD', KEYS[3], 'NX', n, ARGV[3]) == 0 then return 0 end
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -tonumber(ARGV[4]) - 1)
return 1
"""
)

# ARGV[3...] field/value pairs.
_SET_FIELDS = (
    _FENCE
    + """
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
return 1
"""
)

# KEYS[3] history list; ARGV[3] item.
_APPEND_HISTORY = (
    _FENCE
    + """
return redis.call('RPUSH', KEYS[3], ARGV[3])
"""
)

# KEYS[3] history list; ARGV[3] op, ARGV[4] the stored item it is relative
# to (exact bytes; "" = the start), ARGV[5] new item. Items are found by
# value, so an edit never lands on a shifted index.
_EDIT_HISTORY = (
    _FENCE
    + """
local op, at, item = ARGV[3], ARGV[4], ARGV[5]
if op == 'insert_after' then
  if at == '' then return redis.call('LPUSH', KEYS[3], item) end
  return redis.call('LINSERT', KEYS[3], 'AFTER', at, item)
elseif op == 'replace' then
  local i = redis.call('LPOS', KEYS[3], at)
  if not i then return -1 end
  redis.call('LSET', KEYS[3], i, item)
  return 1
elseif op == 'delete' then
  return redis.call('LREM', KEYS[3], 1, at)
end
return redis.error_reply('BAD_OP')
"""
)

# What a stalled or restarting Redis raises; waited out, up to the outage bound.
_OUTAGE = (redis_errors.ConnectionError, redis_errors.TimeoutError)


class NotOwnerError(RuntimeError):
    """Another replica owns the session now (or it ended); this one's writes are refused."""


class StoreUnavailable(RuntimeError):
    """Redis did not answer an owner's write or read within the outage bound."""


@dataclass(frozen=True)
class Journal:
    """Events after a cursor, or why they cannot all be given."""

    events: list[tuple[int, bytes]]
    # "" when complete; else "journal_gap" or "journal_overflow".
    missing: str


@dataclass(frozen=True)
class Opened:
    incarnation: int


class SessionStore:
    def __init__(
        self,
        client: aioredis.Redis,
        *,
        lease_ms: int,
        journal_max_bytes: int,
        journal_ttl_s: float,
        ops_cache_size: int,
        outage_s: float = 60.0,
    ) -> None:
        # redis-py's return types are unions over its decode modes; this store
        # always runs with bytes responses.
        self._r: Any = client
        self.lease_ms = lease_ms
        self._journal_max_bytes = journal_max_bytes
        self._journal_ttl_ms = int(journal_ttl_s * 1000)
        self._ops_cache_size = ops_cache_size
        # How long an owner's call waits out a Redis that does not answer.
        self._outage_s = outage_s
        self._admit = client.register_script(_ADMIT)
        self._open = client.register_script(_OPEN)
        self._refresh = client.register_script(_REFRESH)
        self._take_over = client.register_script(_TAKE_OVER)
        self._append_event = client.register_script(_APPEND_EVENT)
        self._trim_acked = client.register_script(_TRIM_ACKED)
        self._record_op = client.register_script(_RECORD_OP)
        self._set_fields = client.register_script(_SET_FIELDS)
        self._append_history = client.register_script(_APPEND_HISTORY)
        self._edit_history = client.register_script(_EDIT_HISTORY)

    async def ping(self) -> bool:
        try:
            return bool(await self._r.ping())
        except Exception:
            return False

    # --------------------------------------------------------- admission
    async def admit(self, session_id: str, max_sessions: int, token: str) -> bool:
        """Atomically take one of `max_sessions` slots for this session, which
        the owner `token` (its opener) leases until it opens it."""
        return bool(
            await self._admit(
                keys=[keys.ADMITTED, keys.owner(session_id)],
                args=[session_id, max_sessions, token, self.lease_ms],
            )
        )

    async def release(self, session_id: str) -> None:
        await self._r.srem(keys.ADMITTED, session_id)

    async def admitted_count(self) -> int:
        return int(await self._r.scard(keys.ADMITTED))

    # ----------------------------------------------------------- session
    async def open(self, session_id: str, token: str, fields: dict[str, bytes | str]) -> Opened:
        args: list[Any] = [token, self.lease_ms]
        for k, v in fields.items():
            args += [k, v]
        inc = await self._open(
            keys=[
                keys.owner(session_id),
                keys.session(session_id),
                keys.journal(session_id),
                keys.history(session_id),
                keys.ops(session_id),
            ],
            args=args,
        )
        return Opened(incarnation=int(inc))

    # ---------------------------------------------------------- ownership
    async def refresh_lease(self, session_id: str, token: str) -> bool:
        """Extend this owner's lease; False once another owner holds the session."""
        args: list[Any] = [token, self.lease_ms, int(time.time() * 1000)]
        ok = await self._refresh(keys=[keys.owner(session_id), keys.session(session_id)], args=args)
        return bool(ok)

    async def refresh_leases(self, owned: list[tuple[str, str]]) -> list[bool]:
        """`refresh_lease` for many (session id, token) pairs in one round trip.

        One call per session, one after another, took longer than a lease
        at a few hundred sessions under load; a pipeline keeps renewal flat.
        """
        now = int(time.time() * 1000)
        async with self._r.pipeline(transaction=False) as pipe:
            for session_id, token in owned:
                await self._refresh(
                    keys=[keys.owner(session_id), keys.session(session_id)],
                    args=[token, self.lease_ms, now],
                    client=pipe,
                )
            return [bool(ok) for ok in await pipe.execute()]

    async def take_over(self, session_id: str, token: str) -> bool:
        """Become the owner of an open session (its old owner is fenced out)."""
        args: list[Any] = [token, self.lease_ms]
        ok = await self._take_over(
            keys=[keys.owner(session_id), keys.session(session_id)], args=args
        )
        return bool(ok)

    async def owner_alive(self, session_id: str) -> bool:
        return bool(await self._r.exists(keys.owner(session_id)))

    async def claim_orphan(self, session_id: str, token: str) -> bool:
        """Own a session whose owner's lease lapsed (the reaper's way in)."""
        return bool(await self._r.set(keys.owner(session_id), token, nx=True, px=self.lease_ms))

    async def admitted(self) -> list[str]:
        return [m.decode() for m in await self._r.smembers(keys.ADMITTED)]

    async def set_fields(self, session_id: str, token: str, fields: dict[str, bytes | str]) -> None:
        await self._fenced(self._set_fields, session_id, token, [], _pairs(fields))

    async def fields(self, session_id: str) -> dict[bytes, bytes]:
        return dict(await self._r.hgetall(keys.session(session_id)))

    # ----------------------------------------------------------- journal
    async def append_event(self, session_id: str, token: str, seq: int, payload: bytes) -> None:
        await self.commit(session_id, token, [(seq, payload)])

    async def commit(
        self,
        session_id: str,
        token: str,
        events: list[tuple[int, bytes]],
        fields: dict[str, bytes | str] | None = None,
    ) -> None:
        """Journal `events` (seq, payload), in order, then write `fields` to the
        session hash: one pipelined round trip, each write fenced. Retried
        whole after a lost connection (a journaled event again is no repeat)."""
        journal = [keys.journal(session_id)]
        fenced = [keys.owner(session_id), keys.session(session_id)]

        async def once() -> None:
            now = int(time.time() * 1000)
            async with self._r.pipeline(transaction=False) as pipe:
                for seq, payload in events:
                    event: list[Any] = [token, self.lease_ms, seq, payload, now]
                    await self._append_event(
                        keys=fenced + journal,
                        args=[*event, self._journal_max_bytes],
                        client=pipe,
                    )
                if fields:
                    pairs: list[Any] = [token, self.lease_ms, *_pairs(fields)]
                    await self._set_fields(keys=fenced, args=pairs, client=pipe)
                await pipe.execute()

        await self._owner_call(once)

    async def trim_acked(self, session_id: str, token: str, seq: int) -> int:
        trimmed = await self._fenced(
            self._trim_acked, session_id, token, [keys.journal(session_id)], [seq]
        )
        return int(trimmed)

    async def journal_since(self, session_id: str, after_seq: int) -> Journal:
        """Every journaled event after `after_seq`, if the journal still holds them all."""
        return await self._ridden_out(lambda: self._journal_since(session_id, after_seq))

    async def _journal_since(self, session_id: str, after_seq: int) -> Journal:
        fields = await self._r.hmget(keys.session(session_id), "journal_first", "overflowed")
        first = int(fields[0] or 1)
        if after_seq + 1 < first:
            return Journal([], "journal_overflow" if fields[1] else "journal_gap")
        entries = await self._r.xrange(keys.journal(session_id), min=f"({after_seq}-0")
        now_ms = int(time.time() * 1000)
        if entries and now_ms - int(entries[0][1][b"t"]) > self._journal_ttl_ms:
            return Journal([], "journal_gap")
        return Journal([(int(eid.split(b"-")[0]), f[b"e"]) for eid, f in entries], "")

    # ------------------------------------------------------- idempotency
    async def record_operation(self, session_id: str, token: str, operation_id: str) -> bool:
        """True the first time an operation id is seen, False for a retry."""
        first = await self._fenced(
            self._record_op,
            session_id,
            token,
            [keys.ops(session_id)],
            [operation_id, self._ops_cache_size],
        )
        return bool(first)

    # ----------------------------------------------------------- history
    async def append_history(self, session_id: str, token: str, item: bytes) -> int:
        n = await self._fenced(
            self._append_history, session_id, token, [keys.history(session_id)], [item]
        )
        return int(n)

    async def edit_history(
        self, session_id: str, token: str, op: str, at: bytes, item: bytes = b""
    ) -> int:
        """`insert_after`, `replace` or `delete` relative to the stored item `at`.

        Returns what Redis did: the new length (insert; -1 if `at` is gone),
        1/-1 (replace), or the number removed (delete).
        """
        n = await self._fenced(
            self._edit_history, session_id, token, [keys.history(session_id)], [op, at, item]
        )
        return int(n)

    async def history(self, session_id: str) -> list[bytes]:
        return list(await self._ridden_out(lambda: self._r.lrange(keys.history(session_id), 0, -1)))

    # ------------------------------------------------------------ ending
    async def expire(self, session_id: str, ttl_s: float) -> None:
        """Keep a closed session's keys for late readers for `ttl_s`, then drop them."""
        ms = max(1, int(ttl_s * 1000))
        async with self._r.pipeline(transaction=True) as p:
            p.hset(keys.session(session_id), "state", "closed")
            # Ownership ends now: no write of the closed session is accepted.
            p.delete(keys.owner(session_id))
            for key in keys.all_for(session_id):
                p.pexpire(key, ms)
            await p.execute()

    async def _fenced(
        self, script: Any, session_id: str, token: str, more_keys: list[str], args: list[Any]
    ) -> Any:
        """`script` (one of the `_FENCE`d) as the owner `token` of the session."""
        key_list = [keys.owner(session_id), keys.session(session_id), *more_keys]
        return await self._owner_call(
            lambda: script(keys=key_list, args=[token, self.lease_ms, *args])
        )

    async def _owner_call(self, call: Callable[[], Awaitable[T]]) -> T:
        """An owner's fenced write: refused (NotOwnerError) once another owns the session."""
        try:
            return await self._ridden_out(call)
        except aioredis.ResponseError as exc:
            if "NOT_OWNER" in str(exc) or "SEQ_CONFLICT" in str(exc):
                raise NotOwnerError(str(exc)) from exc
            raise

    async def _ridden_out(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call`, again after each lost connection, until Redis answers: a
        paused Redis (SIGSTOP, an AOF rewrite stall) answers late, a restarting
        or failing-over one refuses connections for a while. Past the outage
        bound the owner gives up: StoreUnavailable."""
        delay_s = 0.05
        try:
            async with asyncio.timeout(self._outage_s):
                while True:
                    try:
                        return await call()
                    except _OUTAGE:
                        await asyncio.sleep(delay_s)
                        delay_s = min(2 * delay_s, 1.0)
        except TimeoutError as exc:
            raise StoreUnavailable(f"Redis did not answer for {self._outage_s:g} s") from exc


def _pairs(fields: dict[str, bytes | str]) -> list[bytes | str]:
    return [x for pair in fields.items() for x in pair]
