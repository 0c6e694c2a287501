"""A session's conversation history: the items in Redis, in order.

The history list in Redis is the one source of truth for what the next LLM
prompt holds. Each entry is a serialized `Item`; this module finds items by
id and edits the list through the store's owner-fenced script.
"""

from __future__ import annotations

from antiphon.session.state.store import SessionStore
from antiphon.v1 import common_pb2 as cpb


class ItemNotFound(LookupError):
    def __init__(self, item_id: str) -> None:
        super().__init__(item_id)
        self.item_id = item_id


class Conversation:
    def __init__(self, store: SessionStore, session_id: str, owner_token: str) -> None:
        self._store = store
        self._session_id = session_id
        self._token = owner_token

    async def items(self) -> list[cpb.Item]:
        return [cpb.Item.FromString(raw) for raw in await self._store.history(self._session_id)]

    async def get(self, item_id: str) -> cpb.Item:
        return cpb.Item.FromString(await self._raw(item_id))

    async def append(self, item: cpb.Item) -> None:
        await self._store.append_history(self._session_id, self._token, item.SerializeToString())

    async def insert(self, item: cpb.Item, previous_item_id: str | None) -> None:
        """After `previous_item_id`; None appends, "" puts it first."""
        if previous_item_id is None:
            await self.append(item)
            return
        at = await self._raw(previous_item_id) if previous_item_id else b""
        if await self._edit("insert_after", at, item.SerializeToString()) < 0:
            raise ItemNotFound(previous_item_id)

    async def replace(self, item: cpb.Item) -> None:
        if await self._edit("replace", await self._raw(item.id), item.SerializeToString()) < 0:
            raise ItemNotFound(item.id)

    async def delete(self, item_id: str) -> None:
        if await self._edit("delete", await self._raw(item_id)) < 1:
            raise ItemNotFound(item_id)

    async def place(self, item: cpb.Item, previous_item_id: str | None) -> None:
        """After `previous_item_id`, or last if that item was deleted meanwhile."""
        try:
            await self.insert(item, previous_item_id)
        except ItemNotFound:
            await self.append(item)

    async def last_id(self) -> str:
        items = await self.items()
        return items[-1].id if items else ""

    async def _raw(self, item_id: str) -> bytes:
        for raw in await self._store.history(self._session_id):
            if cpb.Item.FromString(raw).id == item_id:
                return raw
        raise ItemNotFound(item_id)

    async def _edit(self, op: str, at: bytes, item: bytes = b"") -> int:
        return await self._store.edit_history(self._session_id, self._token, op, at, item)
