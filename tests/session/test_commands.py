"""Client commands reach the part they are for: a retried append is applied
once, an update that changes how stage0 listens reconfigures it, a command
the bound backend cannot serve is refused before anything changes. A real
actor over a real Redis; the stage workers are recordings."""

from __future__ import annotations

from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2
from tests.session.harness import MANUAL, session

DB = 8  # shared with test_actor_lifecycle: each test flushes it first


async def test_a_retried_append_is_applied_once(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        audio = spb.AppendAudio(pcm16=b"\x10\x00" * 4800, sample_rate_hz=24000)
        await s.command(append_audio=audio, operation_id="op_1")
        await s.command(append_audio=audio, operation_id="op_1")
        assert len(s.sent0("audio")) == 1
        assert s.count("antiphon_session_duplicate_operations_total") == 1


async def test_an_update_of_the_turn_detection_reconfigures_stage0(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        await s.command(update=spb.UpdateSession(config=cpb.SessionConfigPatch(instructions="x")))
        assert s.kinds() == ["session_updated"] and s.sent0("configure") == []
        vad = cpb.SessionConfigPatch(
            turn_detection=cpb.TurnDetection(mode=cpb.TURN_DETECTION_MODE_SERVER_VAD),
            has_turn_detection=True,
        )
        await s.command(update=spb.UpdateSession(config=vad))
        assert s.kinds() == ["session_updated"]
        (configure,) = s.sent0("configure")
        assert configure.lane == stage_pb2.LANE_SERVER_VAD
        stored = cpb.SessionConfig.FromString((await s.store.fields(s.actor.session_id))[b"config"])
        assert stored.turn_detection.mode == cpb.TURN_DETECTION_MODE_SERVER_VAD


async def test_a_wrong_update_or_an_unserved_barge_in_changes_nothing(redis_url: str) -> None:
    async with session(redis_url, DB, patch=MANUAL) as s:
        await s.attach()
        s.events()
        await s.command(update=spb.UpdateSession(config=cpb.SessionConfigPatch(speed=9.0)))
        await s.command(barge_in=spb.BargeIn(source="vad"), client_type="input.barge_in")
        await s.command(
            update=spb.UpdateSession(
                config=cpb.SessionConfigPatch(overlap_policy="barge_in_on_speech")
            )
        )
        codes = [e.error.code for e in s.events()]
        assert codes == ["invalid_value", "unsupported_capability", "unsupported_capability"]
        assert s.actor.snapshot().config.overlap_policy != "barge_in_on_speech"
        assert s.sent0("configure") == []


async def test_a_heartbeat_is_acknowledged(redis_url: str) -> None:
    async with session(redis_url, DB) as s:
        await s.attach()
        s.events()
        await s.command(heartbeat=spb.Heartbeat())
        assert s.kinds() == ["heartbeat_ack"]
