"""Every kind of Stage0Request (the oneof in antiphon.v1.stage_pb2) has a handler
in each stage0 backend's session, or is listed as ignored there with a reason;
and each handler is given the request's own field, not another of its type."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any
from unittest import mock

import pytest

from antiphon.stage0 import cascade, duplex_session
from antiphon.v1 import stage_pb2 as pb

KINDS = [f.name for f in pb.Stage0Request.DESCRIPTOR.oneofs_by_name["kind"].fields]
# The synthetic backend's sessions are cascade sessions (on scripted engines).
BACKENDS = [(cascade, cascade.CascadeSession), (duplex_session, duplex_session.DuplexSession)]


def _marked(kind: str) -> pb.Stage0Request:
    """A request of `kind` whose message says which kind it is (its first field)."""
    req = pb.Stage0Request(**{kind: {}})
    msg = getattr(req, kind)
    first = msg.DESCRIPTOR.fields[0]
    if first.type == first.TYPE_STRING:
        setattr(msg, first.name, kind)
    else:
        setattr(msg, first.name, KINDS.index(kind) + 1)
    return req


@pytest.mark.parametrize(("module", "session"), BACKENDS, ids=lambda b: b.__name__)
def test_every_request_kind_is_handled_or_ignored_with_a_reason(
    module: ModuleType, session: type
) -> None:
    handlers: Mapping[str, Any] = module.HANDLERS
    ignored: Mapping[str, str] = module.IGNORED
    assert not set(handlers) & set(ignored)
    assert set(handlers) | set(ignored) == set(KINDS)
    assert all(reason.strip() for reason in ignored.values())


@pytest.mark.parametrize(("module", "session"), BACKENDS, ids=lambda b: b.__name__)
def test_each_handler_gets_its_own_kinds_message(module: ModuleType, session: type) -> None:
    handlers: Mapping[str, Callable[[Any, pb.Stage0Request], None]] = module.HANDLERS
    for kind, handler in handlers.items():
        target = mock.Mock(spec=session)
        req = _marked(kind)
        handler(target, req)
        ((_name, args, _kwargs),) = target.method_calls
        assert args == (getattr(req, kind),), kind
