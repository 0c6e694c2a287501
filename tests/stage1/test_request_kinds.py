"""Every kind of Stage1Request (the oneof in antiphon.v1.stage_pb2) has a handler
in each stage1 backend's session, or is listed as ignored there with a reason;
and each handler is given the request's own field."""

from __future__ import annotations

from types import ModuleType

import pytest

from antiphon.stage1.backends.minicpmo import session as unit_session
from antiphon.stage1.frames import session as frame_session
from antiphon.stage1.speech import synthesis
from antiphon.v1 import stage_pb2 as pb
from tests.support.request_kinds import (
    assert_each_handler_gets_its_own_message,
    assert_every_kind_handled_or_ignored,
)

# Piper and the synthetic voice share the text synthesis session; the frame
# backends (mimi, nemotron) the frame session; minicpmo has its unit session.
BACKENDS = [
    (synthesis, synthesis.SynthesisSession),
    (frame_session, frame_session.FrameSession),
    (unit_session, unit_session.UnitSession),
]


@pytest.mark.parametrize(("module", "session"), BACKENDS, ids=lambda b: b.__name__)
def test_every_request_kind_is_handled_or_ignored_with_a_reason(
    module: ModuleType, session: type
) -> None:
    assert_every_kind_handled_or_ignored(module, pb.Stage1Request)


@pytest.mark.parametrize(("module", "session"), BACKENDS, ids=lambda b: b.__name__)
def test_each_handler_gets_its_own_kinds_message(module: ModuleType, session: type) -> None:
    assert_each_handler_gets_its_own_message(module, session, pb.Stage1Request)
