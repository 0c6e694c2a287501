"""The whole stack on one machine: Redis, stage0, stage1, session, gateway.

`make run` uses it (Ctrl-C stops everything cleanly); the end-to-end tests
start it once per test session. Each service is its own process, started
exactly as a container would start it (`python -m antiphon.<tier>.main`)
and configured through the same `ANTIPHON_*` environment.

Which profile the services read: `LocalStack.profile`, local.yaml unless the
caller names another. Only `make run` (`main`) takes the user's
`ANTIPHON_PROFILE`; a `LocalStack` built in a test never does, so a profile
left in the shell does not change every test's stack.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PROFILE = REPO / "deploy" / "profiles" / "local.yaml"
REDIS_HINT = "redis-server is not installed: run `apt-get install -y redis-server` (Debian/Ubuntu)"


# Listening ports are picked below Linux's ephemeral range (32768-60999):
# a port taken from that range could be handed to an outgoing connection
# between the pick and the service's bind.
_PORT_RANGE = (20000, 32000)
_handed_out: set[int] = set()


def free_port() -> int:
    """A port no one listens on and this process has not handed out before."""
    while True:
        port = random.randrange(*_PORT_RANGE)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


def wait_for_port(port: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False


def start_redis(
    port: int, data_dir: Path, log: Path | None = None, databases: int = 16
) -> subprocess.Popen[bytes]:
    """A redis-server on loopback with AOF as in production: an acknowledged
    event survives a Redis restart. `databases`: how many it numbers (Redis's
    default 16; the test session's, one per module that needs its own)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit(REDIS_HINT)
    args = [
        binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir),
        "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
        "--databases", str(databases),
    ]  # fmt: skip
    with log.open("ab") if log else open(os.devnull, "wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    if not wait_for_port(port):
        proc.kill()
        raise RuntimeError("redis-server did not start")
    return proc


@dataclass
class Ports:
    gateway: int = 8000
    session: int = 50051
    stage0: int = 50061
    stage1: int = 50071
    redis: int = 6379
    session_metrics: int = 9101
    stage0_metrics: int = 9111
    stage1_metrics: int = 9121

    @classmethod
    def free(cls) -> Ports:
        return cls(*(free_port() for _ in range(8)))


@dataclass
class LocalStack:
    ports: Ports = field(default_factory=Ports)
    run_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="antiphon-")))
    redis_url: str = ""
    profile: Path = DEFAULT_PROFILE
    extra_env: dict[str, str] = field(default_factory=dict)
    # Session replicas behind the gateway's one round-robin channel, as a
    # Kubernetes headless Service spreads them: replica k listens on the
    # session port + k and serves metrics on the session metrics port + k.
    session_replicas: int = 1
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.gateway}"

    def log_path(self, name: str) -> Path:
        return self.run_dir / f"{name}.log"

    @property
    def session_names(self) -> list[str]:
        """The replicas' process names: "session", then "session_1", ..."""
        return ["session", *(f"session_{k}" for k in range(1, self.session_replicas))]

    @property
    def session_metrics_ports(self) -> list[int]:
        return [self.ports.session_metrics + k for k in range(self.session_replicas)]

    def session_target(self) -> str:
        """The gateway's gRPC target: one replica's address, or all of them
        (grpc's `ipv4:` resolver; the channel's round_robin spreads streams)."""
        addresses = [f"127.0.0.1:{self.ports.session + k}" for k in range(self.session_replicas)]
        return addresses[0] if len(addresses) == 1 else "ipv4:" + ",".join(addresses)

    def base_env(self) -> dict[str, str]:
        """What every service of this stack is configured with."""
        p = self.ports
        return {
            "ANTIPHON_PROFILE": str(self.profile),
            "ANTIPHON_REDIS_URL": self.redis_url,
            "ANTIPHON_STAGE0_ADDRESSES": f'["127.0.0.1:{p.stage0}"]',
            "ANTIPHON_STAGE1_ADDRESSES": f'["127.0.0.1:{p.stage1}"]',
            "ANTIPHON_SESSION_ADDRESS": self.session_target(),
            **self.extra_env,
        }

    def start(self, timeout_s: float = 600.0) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not self.redis_url:
            self._start_redis()
        p = self.ports
        self.spawn_grpc("stage0", "stage0", p.stage0, p.stage0_metrics)
        self.spawn_grpc("stage1", "stage1", p.stage1, p.stage1_metrics)
        for k, name in enumerate(self.session_names):
            self.spawn_grpc(name, "session", p.session + k, p.session_metrics + k)
        self.spawn_gateway("gateway", p.gateway)
        self.wait_ready(timeout_s)

    def spawn_grpc(
        self, name: str, tier: str, port: int, metrics_port: int, **env: str
    ) -> subprocess.Popen[bytes]:
        """One more gRPC service process (e.g. a second session replica)."""
        return self.spawn(
            name,
            tier,
            ANTIPHON_LISTEN=f"127.0.0.1:{port}",
            ANTIPHON_METRICS_PORT=str(metrics_port),
            **env,
        )

    def spawn_gateway(self, name: str, port: int, **env: str) -> subprocess.Popen[bytes]:
        return self.spawn(
            name, "gateway", ANTIPHON_HOST="127.0.0.1", ANTIPHON_PORT=str(port), **env
        )

    def spawn(self, name: str, tier: str, **env: str) -> subprocess.Popen[bytes]:
        # The child writes its own copy of the log's descriptor; ours is closed at once.
        with self.log_path(name).open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", f"antiphon.{tier}.main"],
                env={**os.environ, **self.base_env(), **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        self.procs[name] = proc
        return proc

    def backends(self) -> dict[str, str]:
        """Each stage's backend and what it is, as its worker reports it
        (`Describe`), e.g. {"stage0": "moshi (model_native_duplex, 80 ms chunks)"}."""
        import grpc

        from antiphon.v1 import stage_pb2, stage_pb2_grpc

        found: dict[str, str] = {}
        stages = (
            ("stage0", self.ports.stage0, stage_pb2_grpc.Stage0ServiceStub),
            ("stage1", self.ports.stage1, stage_pb2_grpc.Stage1ServiceStub),
        )
        for name, port, stub in stages:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                info = stub(ch).Describe(stage_pb2.DescribeRequest(), timeout=10)
            caps = info.capabilities
            traits = [caps.implementation_level] if caps.implementation_level else []
            if caps.chunk_period_ms:
                traits.append(f"{caps.chunk_period_ms} ms chunks")
            found[name] = f"{info.backend} ({', '.join(traits)})" if traits else info.backend
        return found

    def wait_grpc_ready(self, port: int, service: str, timeout_s: float = 180.0) -> None:
        """Until a gRPC service reports `service` SERVING (e.g. a worker done loading)."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        deadline = time.monotonic() + timeout_s
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while time.monotonic() < deadline:
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.3)
        raise TimeoutError(f"{service} on port {port} not ready within {timeout_s}s")

    def kill(self, name: str) -> None:
        """SIGKILL one process: no drain, no goodbye."""
        proc = self.procs[name]
        proc.kill()
        proc.wait()

    def restart_redis(self) -> None:
        """Stop Redis (it flushes its AOF on SIGTERM) and start it again on its data."""
        proc = self.procs["redis"]
        proc.terminate()
        proc.wait(10)
        self.procs["redis"] = start_redis(self.ports.redis, self.run_dir, self.log_path("redis"))

    def wait_ready(self, timeout_s: float, gateway_port: int = 0) -> None:
        """Until a gateway's /readyz answers 200 (the stack's own gateway by default)."""
        url = f"http://127.0.0.1:{gateway_port or self.ports.gateway}/readyz"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    tail = self.log_path(name).read_text(errors="replace")[-4000:]
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"stack not ready within {timeout_s}s; logs in {self.run_dir}")

    def _start_redis(self) -> None:
        port = self.ports.redis
        self.procs["redis"] = start_redis(port, self.run_dir, self.log_path("redis"))
        self.redis_url = f"redis://127.0.0.1:{port}/0"

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM in reverse start order (front door first), then wait; kill stragglers."""
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def user_profile() -> tuple[Path, str]:
    """The profile `make run` serves: the user's ANTIPHON_PROFILE (relative
    to where they ran it) if set, else local.yaml; and where it came from."""
    named = os.environ.get("ANTIPHON_PROFILE", "")
    if not named:
        return DEFAULT_PROFILE, "the default"
    profile = Path(named).expanduser().resolve()
    if not profile.is_file():
        raise SystemExit(f"ANTIPHON_PROFILE={named}: no such file")
    return profile, "from ANTIPHON_PROFILE"


def shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the whole Antiphon stack locally.")
    parser.add_argument("--port", type=int, default=8000, help="gateway port")
    parser.add_argument(
        "--free-ports",
        action="store_true",
        help="every port but the gateway's picked free (Redis's too), not the defaults",
    )
    parser.add_argument(
        "--run-dir", type=Path, default=REPO / ".run", help="where the logs go (.run)"
    )
    parser.add_argument(
        "--session-replicas",
        type=int,
        default=1,
        help="session processes behind the gateway (ports 50051 + k, metrics 9101 + k)",
    )
    args = parser.parse_args()
    redis_url = os.environ.get("ANTIPHON_REDIS_URL", "")
    if not redis_url and shutil.which("redis-server") is None:
        raise SystemExit(REDIS_HINT)
    ports = Ports.free() if args.free_ports else Ports()
    ports.gateway = args.port
    profile, origin = user_profile()
    stack = LocalStack(
        ports=ports,
        redis_url=redis_url,
        run_dir=args.run_dir,
        profile=profile,
        session_replicas=args.session_replicas,
    )
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(
        f"starting Antiphon with profile {shown(profile)} ({origin}; logs in {stack.run_dir}) ...",
        flush=True,
    )
    try:
        stack.start()
        backends = stack.backends()
        print(
            f"Antiphon is ready\n"
            f"  profile:   {shown(profile)}\n"
            f"  backends:  stage0 {backends['stage0']}, stage1 {backends['stage1']}\n"
            f"  demo:      {stack.gateway_url}/\n"
            f"  realtime:  ws://127.0.0.1:{args.port}/v1/realtime\n"
            f"  readiness: {stack.gateway_url}/readyz\n"
            f"  metrics:   {stack.gateway_url}/metrics (gateway), "
            f"{', '.join(f':{port}' for port in stack.session_metrics_ports)} (session), "
            f":{stack.ports.stage0_metrics} (stage0), "
            f":{stack.ports.stage1_metrics} (stage1)\n"
            f"Ctrl-C stops everything.",
            flush=True,
        )
        while not stopping:
            for name, proc in stack.procs.items():
                if proc.poll() is not None:
                    print(f"{name} exited ({proc.returncode}); see {stack.log_path(name)}")
                    stopping = True
            time.sleep(0.5)
    finally:
        print("stopping ...", flush=True)
        stack.stop()
        print("stopped", flush=True)


if __name__ == "__main__":
    main()
