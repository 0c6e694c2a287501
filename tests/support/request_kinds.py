"""Checks of a stage backend's request dispatch (its module's `HANDLERS` and
`IGNORED` tables) against the oneof of its request message: every kind is
handled or ignored with a reason, and each handler is given the request's own
field, not another of its type."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any
from unittest import mock

from google.protobuf.message import Message


def kinds(request: type[Message]) -> list[str]:
    return [f.name for f in request.DESCRIPTOR.oneofs_by_name["kind"].fields]


def assert_every_kind_handled_or_ignored(module: ModuleType, request: type[Message]) -> None:
    handlers: Mapping[str, Any] = module.HANDLERS
    ignored: Mapping[str, str] = module.IGNORED
    assert not set(handlers) & set(ignored)
    assert set(handlers) | set(ignored) == set(kinds(request))
    assert all(reason.strip() for reason in ignored.values())


def _marked(request: type[Message], kind: str) -> Message:
    """A request of `kind` whose message says which kind it is (its first field)."""
    req = request(**{kind: {}})
    msg = getattr(req, kind)
    first = msg.DESCRIPTOR.fields[0]
    if first.type == first.TYPE_STRING:
        setattr(msg, first.name, kind)
    else:
        setattr(msg, first.name, kinds(request).index(kind) + 1)
    return req


def assert_each_handler_gets_its_own_message(
    module: ModuleType, session: type, request: type[Message]
) -> None:
    handlers: Mapping[str, Callable[[Any, Message], None]] = module.HANDLERS
    for kind, handler in handlers.items():
        target = mock.Mock(spec=session)
        req = _marked(request, kind)
        handler(target, req)
        ((_name, args, _kwargs),) = target.method_calls
        assert args == (getattr(req, kind),), kind
