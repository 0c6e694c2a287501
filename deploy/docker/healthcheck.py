"""Container health checks for the Antiphon images (Docker HEALTHCHECK, Compose).

    python healthcheck.py grpc [SERVICE]   gRPC health of this container's server
    python healthcheck.py http [PATH]      HTTP GET on the gateway (default /healthz)

The port comes from the same environment the service reads (`ANTIPHON_LISTEN`
for gRPC services, `ANTIPHON_PORT` for the gateway), so the check follows a
changed port. An empty gRPC service name asks "alive"; a service's own name
(e.g. `antiphon.v1.Stage0Service`) asks "ready". Exit 0 = healthy, 1 = not.
Kubernetes does not use this file: it probes gRPC and HTTP natively.
"""

from __future__ import annotations

import os
import sys
import urllib.request

TIMEOUT_S = 3.0


def grpc_ok(service: str) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    port = os.environ.get("ANTIPHON_LISTEN", "0.0.0.0:50051").rsplit(":", 1)[1]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT_S
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def http_ok(path: str) -> bool:
    port = os.environ.get("ANTIPHON_PORT", "8000")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=TIMEOUT_S) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("grpc", "http"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[1] == "grpc":
        ok = grpc_ok(argv[2] if len(argv) > 2 else "")
    else:
        ok = http_ok(argv[2] if len(argv) > 2 else "/healthz")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
