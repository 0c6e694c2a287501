"""The start of every gRPC service's process: settings, logs, traces, event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from antiphon.common import config, logs, tracing
from antiphon.common.config import ServiceSettings

S = TypeVar("S", bound=ServiceSettings)


def run(
    service: str, settings_cls: type[S], serve: Callable[[S], Coroutine[Any, Any, None]]
) -> None:
    settings = config.load(settings_cls)
    configure(service, settings)
    asyncio.run(serve(settings))


def configure(service: str, settings: ServiceSettings) -> None:
    """This process's logs and traces, as `settings` say."""
    logs.configure(service, settings.log_level)
    tracing.configure(service, settings.otlp_endpoint)
