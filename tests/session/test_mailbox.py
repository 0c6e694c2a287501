"""A session's mailbox: bounded where its senders can wait, never for control mail."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from prometheus_client import CollectorRegistry, Counter

from antiphon.session.actor import mail
from antiphon.session.stage.stages import Binding, StageResult, StreamEnded
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2


def result(binding: Any = None) -> StageResult:
    return StageResult(cast(Binding[Any], binding), stage_pb2.Stage1Event())


async def test_a_stage_result_past_the_room_waits_until_the_actor_takes_one() -> None:
    waited = Counter("waited", "", ["stage"], registry=CollectorRegistry())
    box = mail.Mailbox(max_commands=8, max_stage_results=2, waited=waited)
    await box.post_stage("stage1", result())
    await box.post_stage("stage1", result())
    third = asyncio.create_task(box.post_stage("stage1", result()))
    await asyncio.sleep(0.05)
    assert not third.done() and box.qsize() == 2
    assert waited.labels("stage1")._value.get() == 1
    # The other stage has room of its own, and a stream's end never waits.
    await box.post_stage("stage0", result())
    await box.post_stage("stage1", StreamEnded(cast(Binding[Any], None)))
    assert box.qsize() == 4
    first = await box.get()
    assert isinstance(first, mail.StageNews) and first.stage == "stage1"
    await asyncio.wait_for(third, 1)
    assert box.qsize() == 4


async def test_commands_wait_for_room_and_control_mail_never_does() -> None:
    box = mail.Mailbox(max_commands=1, max_stage_results=1)
    await box.post_command(mail.Command(1, spb.ClientCommand()))
    second = asyncio.create_task(box.post_command(mail.Command(1, spb.ClientCommand())))
    for _ in range(100):
        box.post(mail.Tick())
    await asyncio.sleep(0.05)
    assert not second.done() and box.qsize() == 101
    assert isinstance(box.get_nowait(), mail.Command)
    await asyncio.wait_for(second, 1)
    while (item := box.get_nowait()) is not None:
        last = item
    assert isinstance(last, mail.Command)
