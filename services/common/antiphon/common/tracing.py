"""OpenTelemetry setup and trace-context propagation over gRPC metadata.

Every service records spans; they are exported over OTLP only when an
endpoint is configured. The W3C `traceparent` rides gRPC metadata so one
turn is one trace across gateway, session and stages.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

log = logging.getLogger(__name__)


def configure(service: str, otlp_endpoint: str = "") -> TracerProvider:
    """Install this process's tracer provider; export only when an endpoint is given."""
    provider = TracerProvider(resource=Resource.create({"service.name": f"antiphon-{service}"}))
    if otlp_endpoint:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning("otlp exporter not installed; traces are not exported")
        else:
            provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint))
            )
    trace.set_tracer_provider(provider)
    return provider


def inject_metadata() -> list[tuple[str, str]]:
    """The current trace context as gRPC metadata pairs."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return list(carrier.items())


def extract_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> context.Context:
    """The trace context a gRPC peer sent, or an empty one."""
    carrier = {k: v if isinstance(v, str) else v.decode() for k, v in (metadata or ())}
    return propagate.extract(carrier)


def metadata_pairs(metadata: Sequence[tuple[str, str | bytes]] | None) -> list[tuple[str, str]]:
    return [(k, v if isinstance(v, str) else v.decode()) for k, v in (metadata or ())]
