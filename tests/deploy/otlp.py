"""A tiny OTLP/gRPC trace receiver on loopback: what a collector would be sent."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as tpb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as tgrpc


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str


class Receiver(tgrpc.TraceServiceServicer):
    """Keeps every span it is sent, with the `service.name` of its resource."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []

    def Export(
        self, request: tpb.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> tpb.ExportTraceServiceResponse:
        got = []
        for rs in request.resource_spans:
            attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
            service = attrs.get("service.name", "")
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(
                        ReceivedSpan(
                            service=service,
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                        )
                    )
        with self._lock:
            self._spans.extend(got)
        return tpb.ExportTraceServiceResponse()

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_until(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout_s: float
    ) -> list[ReceivedSpan]:
        """The spans received once `done(spans)` holds (or the timeout passed)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            spans = self.spans
            if done(spans):
                return spans
            time.sleep(0.1)
        return self.spans


@contextmanager
def receiver() -> Iterator[tuple[Receiver, int]]:
    """A receiver served on a free loopback port; yields it and the port."""
    servicer = Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    tgrpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, port
    finally:
        server.stop(grace=None)
