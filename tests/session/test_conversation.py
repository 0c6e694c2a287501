"""Conversation history edits in a real Redis: order kept, owner fenced."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from antiphon.session.conversation import Conversation, ItemNotFound
from antiphon.session.store import NotOwnerError, SessionStore
from antiphon.v1 import common_pb2 as cpb

DB = 11  # this module's own database on the shared test Redis


def text_item(item_id: str, text: str = "") -> cpb.Item:
    return cpb.Item(
        id=item_id,
        type="message",
        role="user",
        content=[cpb.ContentPart(type="input_text", text=text or item_id)],
    )


@pytest.fixture
async def conversation(redis_url: str) -> AsyncIterator[tuple[SessionStore, Conversation]]:
    client = aioredis.from_url(f"{redis_url.rsplit('/', 1)[0]}/{DB}")
    await client.flushdb()
    store = SessionStore(
        client, lease_ms=5000, journal_max_bytes=1 << 20, journal_ttl_s=60.0, ops_cache_size=4
    )
    await store.open("sess_conv", "own_a", {"state": "open"})
    try:
        yield store, Conversation(store, "sess_conv", "own_a")
    finally:
        await client.aclose()


async def ids(conversation: Conversation) -> list[str]:
    return [item.id for item in await conversation.items()]


async def test_insert_keeps_order_after_a_given_item_or_first(
    conversation: tuple[SessionStore, Conversation],
) -> None:
    _, conv = conversation
    await conv.append(text_item("a"))
    await conv.append(text_item("c"))
    await conv.insert(text_item("b"), "a")
    await conv.insert(text_item("first"), "")
    await conv.insert(text_item("last"), None)
    assert await ids(conv) == ["first", "a", "b", "c", "last"]
    with pytest.raises(ItemNotFound):
        await conv.insert(text_item("x"), "missing")
    assert await ids(conv) == ["first", "a", "b", "c", "last"]


async def test_replace_delete_and_get_by_id(
    conversation: tuple[SessionStore, Conversation],
) -> None:
    _, conv = conversation
    for item_id in ("a", "b", "c"):
        await conv.append(text_item(item_id))
    await conv.replace(text_item("b", "changed"))
    assert (await conv.get("b")).content[0].text == "changed"
    await conv.delete("b")
    assert await ids(conv) == ["a", "c"]
    assert await conv.last_id() == "c"
    with pytest.raises(ItemNotFound):
        await conv.delete("b")
    with pytest.raises(ItemNotFound):
        await conv.get("b")


async def test_a_replaced_owner_cannot_edit_history(
    conversation: tuple[SessionStore, Conversation],
) -> None:
    store, conv = conversation
    await conv.append(text_item("a"))
    assert await store.take_over("sess_conv", "own_b")
    with pytest.raises(NotOwnerError):
        await conv.delete("a")
    with pytest.raises(NotOwnerError):
        await conv.insert(text_item("b"), "a")
    assert await ids(Conversation(store, "sess_conv", "own_b")) == ["a"]
