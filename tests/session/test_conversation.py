"""Conversation history edits in a real Redis: order kept, owner fenced."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from antiphon.session.actor.journal import Fields
from antiphon.session.config import policy, session_config
from antiphon.session.conversation.conversation import Conversation, ItemNotFound
from antiphon.session.state.store import NotOwnerError, SessionStore
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.support.bindings import recording_links
from tests.support.parts import response_control
from tests.support.redis_dbs import db_url

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
    client = aioredis.from_url(db_url(redis_url, DB))
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


class HistoryAtDone:
    """A journal that, as each `response.done` is written, reads the history
    a client (or a replica taking over) would find at that moment."""

    def __init__(self, conversation: Conversation) -> None:
        self._conversation = conversation
        self.types: list[str] = []
        self.history_at_done: list[list[str]] = []

    async def commit(
        self,
        session_id: str,
        token: str,
        events: list[tuple[int, bytes]],
        fields: Fields | None = None,
    ) -> None:
        for _, payload in events:
            event = spb.ServerEvent.FromString(payload)
            self.types.append(event.WhichOneof("kind") or "")
            if event.HasField("response_done"):
                self.history_at_done.append([i.id for i in await self._conversation.items()])


async def test_an_answer_is_in_history_before_its_response_done_is_journaled(
    conversation: tuple[SessionStore, Conversation],
) -> None:
    """A client that reads the conversation on `response.done` finds the answer."""
    _, conv = conversation
    await conv.append(text_item("item_user"))
    journal = HistoryAtDone(conv)
    config = session_config.defaults()
    config.output_modalities[:] = ["text"]
    links, _, _ = recording_links("sess_conv")
    responses = response_control(
        session_id="sess_conv",
        owner_token="own_a",
        config=config,
        journal=journal,
        links=links,
        conversation=conv,
        last_item_id="item_user",
    )
    await responses.start(policy.default_options(config, 64), eager=True)
    assert responses.active is not None
    rid, answer = responses.active.id, responses.active.item_id
    await responses.on_delta(stage_pb2.GenerationDelta(response_id=rid, text="Paris."))
    await responses.on_generation_done(stage_pb2.GenerationDone(response_id=rid))
    assert "response_done" in journal.types
    assert journal.history_at_done == [["item_user", answer]]
