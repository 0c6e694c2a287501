"""OpenTelemetry setup and trace-context propagation over gRPC metadata.

Every service records spans; they are exported over OTLP/gRPC only when an
endpoint is configured (`ANTIPHON_OTLP_ENDPOINT`, e.g. `http://otel-collector:4317`),
and nothing leaves the process when it is not. The W3C `traceparent` rides
gRPC metadata so one turn is one trace across gateway, session and stages.

The standard OpenTelemetry environment still applies on top:
`OTEL_RESOURCE_ATTRIBUTES` (e.g. the pod name), `OTEL_TRACES_SAMPLER`,
`OTEL_BSP_SCHEDULE_DELAY` and the other batch-processor settings.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

log = logging.getLogger(__name__)

SERVICE_NAMESPACE = "antiphon"


def otlp_target(endpoint: str) -> tuple[str, bool]:
    """`(endpoint, insecure)` for the OTLP gRPC exporter.

    `http://host:4317` is plaintext, `https://host:4317` is TLS. A bare
    `host:4317` is taken as plaintext: inside a cluster or a Compose network
    the collector is almost always reached without TLS, and the exporter's
    own default (TLS) would fail every export without a word.
    """
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"otlp_endpoint must be http(s)://host:port, got {endpoint!r}")
    return f"{parts.scheme}://{parts.netloc}", parts.scheme == "http"


def resource(service: str) -> Resource:
    """What identifies this process's spans; `OTEL_RESOURCE_ATTRIBUTES` is merged in."""
    return Resource.create(
        {
            "service.name": f"{SERVICE_NAMESPACE}-{service}",
            "service.namespace": SERVICE_NAMESPACE,
            # The pod (Kubernetes) or container (Compose) name: tells replicas apart.
            "service.instance.id": os.environ.get("HOSTNAME") or socket.gethostname(),
        }
    )


def configure(service: str, otlp_endpoint: str = "") -> TracerProvider:
    """Install this process's tracer provider; export only when an endpoint is given.

    Spans are always recorded (so the trace context still propagates to the
    next hop); with an endpoint a batch processor ships them over OTLP/gRPC
    and flushes at exit.
    """
    provider = TracerProvider(resource=resource(service))
    if otlp_endpoint:
        # Imported only when exporting: a process that exports nothing never loads it.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        endpoint, insecure = otlp_target(otlp_endpoint)
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=insecure))
        )
        log.info("exporting traces", extra={"otlp_endpoint": endpoint})
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
