"""Stage1's backends: a table from a backend's name to the module that builds it.

Each backend is a package here (`piper/`, `mimi/`, `nemotron/`, `minicpmo/`, `synthetic/`) whose
`backend.py` exposes `BACKEND`, a `Backend`: the capabilities its chunks
honour (sent in `Describe`) and `open`, which builds the worker's session
factory from a `BackendContext` and tears it down on exit. A worker imports
only the backend it is asked for (`load`): the `synthetic` one never loads
Piper's onnxruntime, nor `mimi`'s torch, nor `nemotron`'s NeMo, nor `minicpmo`'s talker.
Adding a backend is one new package
and one row in `BACKENDS`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from antiphon.stage1.metrics import Stage1Metrics
    from antiphon.stage1.service import SessionFactory
    from antiphon.stage1.settings import Stage1Settings
    from antiphon.v1 import common_pb2 as cpb

# A backend's name (the `backend` setting) -> the module whose `BACKEND` builds it.
BACKENDS: Mapping[str, str] = MappingProxyType(
    {
        "piper": "antiphon.stage1.backends.piper.backend",
        "synthetic": "antiphon.stage1.backends.synthetic.backend",
        "mimi": "antiphon.stage1.backends.mimi.backend",
        "nemotron": "antiphon.stage1.backends.nemotron.backend",
        "minicpmo": "antiphon.stage1.backends.minicpmo.backend",
    }
)


@dataclass(frozen=True)
class BackendContext:
    """What the worker gives a backend to build its sessions with."""

    settings: Stage1Settings
    metrics: Stage1Metrics
    # The worker's metrics registry, for a backend's own metrics.
    registry: CollectorRegistry
    # Called when the backend can serve no session any more (a dead decode
    # loop): the worker stops, so that its sessions move to another.
    on_failure: Callable[[], None]


@dataclass(frozen=True)
class Backend:
    """What a backend module exposes as `BACKEND`."""

    # What every session of this backend honours, sent in `Describe`.
    capabilities: cpb.Capabilities
    # Loads the model, yields the factory of the worker's sessions, and
    # releases what it loaded on exit.
    open: Callable[[BackendContext], AbstractAsyncContextManager[SessionFactory]]


class UnknownBackendError(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown stage1 backend {name!r}; use one of {', '.join(BACKENDS)}")
        self.name = name


def module_for(name: str) -> str:
    """The dotted path of backend `name`'s module, or UnknownBackendError."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise UnknownBackendError(name) from None


def load(name: str) -> Backend:
    """Import backend `name`'s module (only now) and return its `BACKEND`."""
    backend = getattr(importlib.import_module(module_for(name)), "BACKEND", None)
    if not isinstance(backend, Backend):
        raise TypeError(f"{module_for(name)}.BACKEND is not a stage1 Backend: {backend!r}")
    return backend
