"""Shared fixtures: a real Redis per test session, and the local stacks; the tier checks.

Expensive things start once per test session and are shared: the Redis
server, the synthetic stack (serving-path tests), the real-model stack
(end-to-end tests with Silero, Whisper, the LLM on vLLM and Piper) and the
duplex model's stack (the e2e tests and third-party GPT-Live clients). A test
that uses a stack is marked `stack`, one that loads a model `models`, one
that runs helm `npm`; the hooks below fail one that is not
(`tests/support/tiers.py`). `--fast` (`make test-fast`) leaves those out and
runs the rest with the network off (`tests/support/offline.py`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from stack import REPO, LocalStack, Ports, free_port, start_redis

from tests.support import auth, tiers
from tests.support.offline import Offline
from tests.support.stacks import started


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier (`make test-fast`): leave out tests marked "
        f"{', '.join(tiers.FAST_LEAVES_OUT)}, and fail any that reaches past this machine",
    )


def pytest_configure(config: pytest.Config) -> None:
    tiers.activate()
    tiers.guard_engines()
    if config.getoption("fast"):
        # Before collection: the fuzz tests size themselves by it (tests/support/fuzz.py).
        settings.register_profile(tiers.FAST_PROFILE)
        settings.load_profile(tiers.FAST_PROFILE)
        offline = Offline()
        offline.install()
        config.pluginmanager.register(offline, "antiphon-offline")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("fast"):
        # The shared stacks live to the session's end; a test that loads its
        # own model engine runs before the first of them starts, not beside
        # them (CI: a vLLM engine beside three stacks ran 24 GB out).
        items.sort(key=tiers.starts_no_stack)
        return
    left_out = [item for item in items if not tiers.in_fast_tier(item)]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if tiers.in_fast_tier(item)]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """The running test, for the tier checks of whatever it loads or starts."""
    tiers.set_current(item)
    try:
        return (yield)
    finally:
        tiers.set_current(None)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    tiers.check_item(item)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real redis-server on a free port, with AOF as in production."""
    port = free_port()
    data = Path(tempfile.mkdtemp(prefix="antiphon-redis-"))
    # Databases 0-15 are taken by modules and stacks; 16 and up are free.
    proc = start_redis(port, data, databases=32)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(data, ignore_errors=True)


def _stack(redis_url: str, db: int, **env: str) -> LocalStack:
    # Each stack gets its own Redis database: admission counts are per deployment.
    url = f"{redis_url.rsplit('/', 1)[0]}/{db}"
    return LocalStack(ports=Ports.free(), redis_url=url, extra_env=env)


# The profile's worker capacity is the cascade's, measured on this box; the
# scripted backends serve more, and admission tests count on max_sessions.
SYNTHETIC_CAPACITY = {"ANTIPHON_BACKEND": "synthetic", "ANTIPHON_CAPACITY": "16"}
# Audio cut at clause ends only, never by the clock (stage1's underrun guard
# speaks words early when playback would run dry, which depends on timing):
# the golden transcripts pin every audio delta of these stacks' answers.
CLAUSE_CUTS_ONLY = {"ANTIPHON_UNDERRUN_GUARD_MS": "0"}


@pytest.fixture(scope="session")
def synthetic_stack(request: pytest.FixtureRequest, redis_url: str) -> Iterator[LocalStack]:
    """Gateway, session and the `synthetic` stage backends: the serving path alone."""
    stack = _stack(
        redis_url,
        1,
        **SYNTHETIC_CAPACITY,
        **CLAUSE_CUTS_ONLY,
        ANTIPHON_MAX_SESSIONS="3",
        ANTIPHON_DISCONNECT_GRACE_S="2",
        # WebRTC calls (tests/e2e/test_webrtc_calls.py): a low bound to reach,
        # and a media timeout a test can wait out.
        ANTIPHON_MAX_CALLS="2",
        ANTIPHON_CALL_MEDIA_TIMEOUT_S="3",
    )
    with started(request, stack, timeout_s=180):
        yield stack


@pytest.fixture(scope="session")
def two_slot_stack(request: pytest.FixtureRequest, redis_url: str) -> Iterator[LocalStack]:
    """The serving path with room for two sessions on each stage worker: what
    "capacity follows the sockets" is measured against. Admission allows
    more, so only the stage slots limit; a 30 s grace outlasts a 10 s drop;
    the scripted LLM speaks a word per 120 ms, so a reply can be cut off."""
    stack = _stack(
        redis_url,
        12,
        ANTIPHON_BACKEND="synthetic",
        ANTIPHON_CAPACITY="2",
        ANTIPHON_MAX_SESSIONS="4",
        ANTIPHON_DISCONNECT_GRACE_S="30",
        ANTIPHON_SYNTHETIC_TOKEN_MS="120",
    )
    with started(request, stack, timeout_s=180):
        yield stack


@pytest.fixture(scope="session")
def slow_synthetic_stack(request: pytest.FixtureRequest, redis_url: str) -> Iterator[LocalStack]:
    """The serving path with a slow scripted LLM (one word per 300 ms): a reply is
    still being spoken when a test talks over it."""
    stack = _stack(
        redis_url, 3, **SYNTHETIC_CAPACITY, **CLAUSE_CUTS_ONLY, ANTIPHON_SYNTHETIC_TOKEN_MS="300"
    )
    with started(request, stack, timeout_s=180):
        yield stack


@pytest.fixture(scope="session")
def model_stack(request: pytest.FixtureRequest, redis_url: str) -> Iterator[LocalStack]:
    """The whole stack with the real models (the default backends)."""
    tiers.require(request, tiers.MODELS, "starts the real-model stack")
    stack = _stack(redis_url, 2)
    with started(request, stack, timeout_s=600):
        yield stack


DUPLEX_PROFILE = REPO / "deploy" / "profiles" / "duplex.yaml"


@pytest.fixture(scope="session")
def spare_ports() -> dict[str, int]:
    """The ports of each stage's second worker, by process name."""
    return {"stage0_b": free_port(), "stage1_b": free_port()}


@pytest.fixture(scope="session")
def duplex_stack(
    request: pytest.FixtureRequest, spare_ports: dict[str, int]
) -> Iterator[LocalStack]:
    """The Moshi architecture's tiny random configuration behind the whole stack,
    with a second worker of each stage (`spare_ports`) to fail over to. The
    first stage0 keeps its KV cache in float8 (issue 50: the whole-stack
    duplex tests pass on it), the spare in the model's dtype, the default,
    so a failover crosses formats."""
    ports = Ports.free()
    spare0, spare1 = spare_ports["stage0_b"], spare_ports["stage1_b"]
    stack = LocalStack(
        ports=ports,
        profile=DUPLEX_PROFILE,
        extra_env={
            # Both stages read it: stage0 builds the encoder and LM, stage1 the decoder.
            "ANTIPHON_DUPLEX_CHECKPOINT": "random:tiny",
            # Sampled (greedy random weights settle on one token): the model
            # talks, pads and goes quiet by itself.
            "ANTIPHON_DUPLEX_TEMPERATURE": "1.0",
            "ANTIPHON_DUPLEX_TEXT_TEMPERATURE": "1.0",
            "ANTIPHON_DUPLEX_QUIET_FRAMES": "2",
            "ANTIPHON_DUPLEX_SEED": "7",
            "ANTIPHON_DUPLEX_KV_CACHE": "fp8",
            "ANTIPHON_CAPACITY": "3",
            "ANTIPHON_MAX_SESSIONS": "4",
            "ANTIPHON_DISCONNECT_GRACE_S": "10",
            "ANTIPHON_STAGE0_ADDRESSES": f'["127.0.0.1:{ports.stage0}", "127.0.0.1:{spare0}"]',
            "ANTIPHON_STAGE1_ADDRESSES": f'["127.0.0.1:{ports.stage1}", "127.0.0.1:{spare1}"]',
        },
    )
    with started(request, stack, timeout_s=180):
        stack.spawn_grpc(
            "stage0_b", "stage0", spare0, free_port(), ANTIPHON_DUPLEX_KV_CACHE="model"
        )
        stack.spawn_grpc("stage1_b", "stage1", spare1, free_port())
        stack.wait_grpc_ready(spare0, "antiphon.v1.Stage0Service")
        stack.wait_grpc_ready(spare1, "antiphon.v1.Stage1Service")
        yield stack


@pytest.fixture(scope="session")
def auth_stack(
    request: pytest.FixtureRequest, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalStack]:
    """The serving path behind an authenticating gateway (`tests.support.auth`):
    keys from a file and the single `api_key`, a signing key, per-key limits,
    the demo endpoint and an Origin allow-list naming the gateway's own page."""
    keys = tmp_path_factory.mktemp("keys") / "api-keys"
    keys.write_text(auth.KEYS_FILE)
    ports = Ports.free()
    stack = LocalStack(
        ports=ports,
        redis_url=f"{redis_url.rsplit('/', 1)[0]}/13",
        extra_env={
            **SYNTHETIC_CAPACITY,
            **auth.gateway_env(keys, ports.gateway),
            "ANTIPHON_MAX_SESSIONS": "8",
            "ANTIPHON_DISCONNECT_GRACE_S": "2",
        },
    )
    with started(request, stack, timeout_s=180):
        yield stack
