"""The configuration now: a patch is judged before it changes anything, and
adopting it says whether stage0 must listen another way."""

from __future__ import annotations

import pytest

from antiphon.session.actor.errors import Rejection
from antiphon.session.config import session_config
from antiphon.session.config.current_config import CurrentConfig
from antiphon.v1 import common_pb2 as cpb
from antiphon.v1 import session_pb2 as spb
from antiphon.v1 import stage_pb2


def test_a_wrong_patch_is_refused_and_the_configuration_stays() -> None:
    config = CurrentConfig("s", session_config.defaults(), max_output_tokens=64)
    before = config.now
    with pytest.raises(Rejection) as refused:
        config.merged(cpb.SessionConfigPatch(speed=9.0))
    assert refused.value.type == "invalid_request_error" and config.now is before


def test_adopting_a_patch_says_when_the_lane_changed() -> None:
    config = CurrentConfig("s", session_config.defaults(), max_output_tokens=64)
    assert config.lane == stage_pb2.LANE_SERVER_VAD and config.auto_response
    assert not config.adopt(config.merged(cpb.SessionConfigPatch(instructions="be brief")))
    assert config.now.instructions == "be brief"
    assert config.adopt(config.merged(cpb.SessionConfigPatch(has_turn_detection=True)))
    assert config.lane == stage_pb2.LANE_MANUAL and not config.auto_response
    assert config.stage0_open().session_id == "s"


def test_a_response_never_gets_more_tokens_than_the_server_allows() -> None:
    config = CurrentConfig("s", session_config.defaults(), max_output_tokens=64)
    assert config.default_options().max_output_tokens <= 64
    asked = config.requested_options(spb.CreateResponse(max_output_tokens=10_000))
    assert asked.max_output_tokens == 64
