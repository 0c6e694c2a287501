"""The binding's outbox: results out in order, merged only while they wait, bounded."""

from __future__ import annotations

import asyncio

from antiphon.common.outbox import Outbox


def joined(last: str, new: str) -> str | None:
    """Text results merge; a result starting with "!" stands alone."""
    if last.startswith("!") or new.startswith("!"):
        return None
    return last + new


async def drained(out: Outbox[str]) -> list[str]:
    """What a writer gets from the outbox, closed now, to its end."""
    out.close()
    got = []
    while (result := await out.get()) is not None:
        got.append(result)
    return got


async def test_results_come_out_in_order_one_by_one_without_a_merge() -> None:
    out: Outbox[str] = Outbox(10)
    for result in ("a", "b", "c"):
        out.put(result)
    assert await drained(out) == ["a", "b", "c"]


async def test_waiting_results_merge_and_those_that_may_not_stay_apart() -> None:
    out: Outbox[str] = Outbox(10, joined)
    for result in ("a", "b", "!x", "c", "d", "e"):
        out.put(result)
    assert len(out) == 3
    assert await drained(out) == ["ab", "!x", "cde"]


async def test_a_result_the_writer_took_is_never_merged_into() -> None:
    out: Outbox[str] = Outbox(10, joined)
    out.put("a")
    assert await out.get() == "a"
    out.put("b")
    out.put("c")
    assert await out.get() == "bc"
    out.put("d")
    assert await out.get() == "d"


async def test_a_waiting_writer_gets_the_first_result_as_it_comes() -> None:
    """No added latency: the writer does not wait for a merge partner."""
    out: Outbox[str] = Outbox(10, joined)
    writer = asyncio.create_task(out.get())
    await asyncio.sleep(0)
    out.put("a")
    assert await asyncio.wait_for(writer, 1) == "a"


async def test_past_the_limit_it_closes_after_those_waiting_and_drops_the_rest() -> None:
    out: Outbox[str] = Outbox(3)
    for result in ("a", "b", "c", "d", "e"):
        out.put(result)
    assert out.closed and out.overflowed
    assert await drained(out) == ["a", "b", "c"]


async def test_a_merge_at_the_limit_adds_nothing_that_waits() -> None:
    out: Outbox[str] = Outbox(2, joined)
    for result in ("!x", "a", "b", "c"):
        out.put(result)
    assert not out.overflowed
    out.put("!y")
    assert out.overflowed
    assert await drained(out) == ["!x", "abc"]


async def test_closing_ends_a_waiting_writer_and_later_results_are_dropped() -> None:
    out: Outbox[str] = Outbox(10, joined)
    writer = asyncio.create_task(out.get())
    await asyncio.sleep(0)
    out.close()
    assert await asyncio.wait_for(writer, 1) is None
    out.put("a")
    assert len(out) == 0
    assert await out.get() is None
