"""Every kind of Stage0Request (the oneof in antiphon.v1.stage_pb2) has a handler
in each stage0 backend's session, or is listed as ignored there with a reason;
and each handler is given the request's own field, not another of its type."""

from __future__ import annotations

from types import ModuleType

import pytest

from antiphon.stage0.backends.cascade import session as cascade
from antiphon.stage0.backends.moshi import session as duplex_session
from antiphon.v1 import stage_pb2 as pb
from tests.support.request_kinds import (
    assert_each_handler_gets_its_own_message,
    assert_every_kind_handled_or_ignored,
)

# The synthetic backend's sessions are cascade sessions (on scripted engines).
BACKENDS = [(cascade, cascade.CascadeSession), (duplex_session, duplex_session.DuplexSession)]


@pytest.mark.parametrize(("module", "session"), BACKENDS, ids=lambda b: b.__name__)
def test_every_request_kind_is_handled_or_ignored_with_a_reason(
    module: ModuleType, session: type
) -> None:
    assert_every_kind_handled_or_ignored(module, pb.Stage0Request)


@pytest.mark.parametrize(("module", "session"), BACKENDS, ids=lambda b: b.__name__)
def test_each_handler_gets_its_own_kinds_message(module: ModuleType, session: type) -> None:
    assert_each_handler_gets_its_own_message(module, session, pb.Stage0Request)
