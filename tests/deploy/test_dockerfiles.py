"""One Dockerfile per service (and a CUDA stage0): multi-stage, non-root, health
checked, and the front tiers carry no model stack. Docker cannot run here, so
the files are read; the health-check script they all use is run for real."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pytest
from stack import LocalStack, free_port

from antiphon.common.config import ServiceSettings
from antiphon.session.settings import SessionSettings
from antiphon.stage0.settings import Stage0Settings
from antiphon.stage1.settings import Stage1Settings
from tests.deploy import tools
from tests.deploy.tools import REPO

DOCKERFILES = {
    "gateway": REPO / "services" / "gateway" / "Dockerfile",
    "session": REPO / "services" / "session" / "Dockerfile",
    "stage0": REPO / "services" / "stage0" / "Dockerfile",
    "stage0-cuda": REPO / "services" / "stage0" / "Dockerfile.cuda",
    "stage1": REPO / "services" / "stage1" / "Dockerfile",
}
# What deploy/docker-compose.local.yml builds where Redis and Prometheus
# cannot be pulled: linted as the tiers' Dockerfiles are.
LOCAL_DOCKERFILES = {
    "local-redis": REPO / "deploy" / "docker" / "local" / "redis.Dockerfile",
    "local-prometheus": REPO / "deploy" / "docker" / "local" / "prometheus.Dockerfile",
}
GRPC_SETTINGS: dict[str, type[ServiceSettings]] = {
    "session": SessionSettings,
    "stage0": Stage0Settings,
    "stage0-cuda": Stage0Settings,
    "stage1": Stage1Settings,
}
HEALTHCHECK = REPO / "deploy" / "docker" / "healthcheck.py"
HADOLINT_CONFIG = REPO / "deploy" / "docker" / "hadolint.yaml"


@dataclass
class Instruction:
    op: str
    args: str


def parse(path: Path) -> list[list[Instruction]]:
    """The instructions of each build stage (comments dropped, continuations joined)."""
    stages: list[list[Instruction]] = [[]]
    logical = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#") or not line:
            continue
        logical += " " + line
        if logical.endswith("\\"):
            logical = logical[:-1]
            continue
        op, _, args = logical.strip().partition(" ")
        logical = ""
        if op.upper() == "FROM":
            stages.append([])
        stages[-1].append(Instruction(op.upper(), args.strip()))
    return stages[1:]  # stages[0] holds the ARGs before the first FROM


def env_of(stage: list[Instruction]) -> dict[str, str]:
    out = {}
    for ins in stage:
        if ins.op == "ENV":
            for pair in ins.args.split():
                key, _, value = pair.partition("=")
                out[key] = value
    return out


def dockerignore_includes(path: str) -> bool:
    """Docker's rule: the last pattern matching the path or a folder above it decides."""
    rules = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    candidates = [path, *(str(p) for p in PurePosixPath(path).parents if str(p) != ".")]
    included = True
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatch(c, pattern) for c in candidates):
            included = negate
    return included


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfile_is_multi_stage_non_root_health_checked(name: str) -> None:
    stages = parse(DOCKERFILES[name])
    assert len(stages) >= 2, "multi-stage: build tools stay out of the final image"
    final = stages[-1]
    ops = {i.op: i.args for i in final}
    user = ops["USER"].split(":")[0]
    assert user.isdigit() and int(user) != 0, "a numeric non-root user (runAsNonRoot can check it)"
    assert "HEALTHCHECK" in ops and "healthcheck.py" in ops["HEALTHCHECK"]
    service = name.split("-")[0]
    assert json.loads(ops["ENTRYPOINT"]) == ["python", "-m", f"antiphon.{service}.main"]
    # No shell form: a shell as PID 1 would swallow SIGTERM and skip the drain.
    assert ops["ENTRYPOINT"].startswith("[")
    assert env_of(final).get("PYTHONDONTWRITEBYTECODE") == "1"


@pytest.mark.parametrize("name", sorted(DOCKERFILES | LOCAL_DOCKERFILES))
def test_dockerfile_passes_hadolint(name: str) -> None:
    """hadolint parses the file as Docker does and checks the usual mistakes
    (shell-form entrypoints, apt caches left behind, missing -y, cd in RUN, ...)."""
    proc = subprocess.run(
        [
            str(tools.hadolint()),
            "--no-color",
            "--config",
            str(HADOLINT_CONFIG),
            str((DOCKERFILES | LOCAL_DOCKERFILES)[name]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def pip_targets(name: str) -> list[str]:
    """The local paths (extras dropped) the build stage's `pip install` names."""
    build = parse(DOCKERFILES[name])[0]
    runs = " ".join(i.args for i in build if i.op == "RUN")
    return [m.group(1) for m in re.finditer(r"\"?\./([\w/.-]+?)(?:\[[\w,-]+\])?\"?(?=\s|$)", runs)]


@pytest.mark.parametrize("name", ["gateway", "session"])
def test_front_tier_images_install_only_their_own_distribution(name: str) -> None:
    assert pip_targets(name) == ["services/common", f"services/{name}"]
    runs = " ".join(i.args for stage in parse(DOCKERFILES[name]) for i in stage if i.op == "RUN")
    for heavy in ("torch", "vllm", "stage0", "stage1"):
        assert heavy not in runs


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_what_a_dockerfile_copies_builds_its_tiers_distributions(name: str, tmp_path: Path) -> None:
    """The build stage's COPYs, replayed from the repository less what
    .dockerignore keeps out, then a wheel of each path its `pip install`
    names, built from that copy alone: a Dockerfile that copies too little
    (the client's folder the single distribution once named, services/common)
    fails here, not in a user's `docker compose up --build`."""
    build = parse(DOCKERFILES[name])[0]
    workdir = next(i.args for i in build if i.op == "WORKDIR")
    context = tmp_path / "context"
    for ins in build:
        if ins.op != "COPY" or "--from=" in ins.args:
            continue
        *sources, dest = ins.args.split()
        for src in sources:
            # A relative destination is under WORKDIR already.
            at = PurePosixPath(dest)
            copy_context_path(src, context / (at.relative_to(workdir) if at.is_absolute() else at))
    wheels = tmp_path / "wheels"
    for target in pip_targets(name):
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
             "--no-index", "-w", str(wheels), str(context / target)],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        assert proc.returncode == 0, f"{target}: {proc.stderr[-2000:]}"
    installed = {n for whl in wheels.glob("*.whl") for n in zipfile.ZipFile(whl).namelist()}
    service = name.split("-")[0]
    for module in (f"antiphon/{service}/main.py", "antiphon/common/config.py", "antiphon/v1/"):
        assert any(n.startswith(module) for n in installed), module
    # Its own tier's code and the shared code, nothing of another tier's.
    tiers = {n.split("/")[1] for n in installed if n.startswith("antiphon/")}
    assert tiers == {service, "common", "v1"}


def copy_context_path(src: str, dest: Path) -> None:
    """`COPY src dest` of a folder or file, as Docker sends it: only what the
    context (.dockerignore) lets in."""
    root = REPO / src
    files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        if dockerignore_includes(rel):
            target = dest if root.is_file() else dest / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


@pytest.mark.parametrize("name", sorted(GRPC_SETTINGS))
def test_image_ports_are_the_service_defaults(name: str) -> None:
    final = parse(DOCKERFILES[name])[-1]
    env = env_of(final)
    fields = GRPC_SETTINGS[name].model_fields
    assert env["ANTIPHON_LISTEN"] == fields["listen"].default
    assert env["ANTIPHON_METRICS_PORT"] == str(fields["metrics_port"].default)
    exposed = {int(p) for i in final if i.op == "EXPOSE" for p in i.args.split()}
    assert exposed == {
        int(env["ANTIPHON_LISTEN"].rsplit(":", 1)[1]),
        fields["metrics_port"].default,
    }


@pytest.mark.parametrize("name", ["stage0", "stage0-cuda"])
def test_stage0_models_are_prepared_at_build_time_into_the_model_cache(name: str) -> None:
    stages = parse(DOCKERFILES[name])
    final = stages[-1]
    cache = env_of(final)["ANTIPHON_MODEL_CACHE"]
    assert any(
        i.op == "COPY" and i.args.split()[-1] == cache and "--from=" in i.args for i in final
    )
    prepare = [
        i.args
        for s in stages[:-1]
        for i in s
        if i.op == "RUN" and "-m antiphon.stage0.prepare" in i.args
    ]
    assert prepare and prepare[0].split()[-1] == cache


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_every_copied_path_exists_and_is_in_the_build_context(name: str) -> None:
    for stage in parse(DOCKERFILES[name]):
        for ins in stage:
            if ins.op != "COPY" or "--from=" in ins.args:
                continue
            *sources, _dest = ins.args.split()
            for src in sources:
                assert (REPO / src).exists(), src
                assert dockerignore_includes(src), f"{src} is excluded by .dockerignore"


def test_dockerignore_keeps_the_context_small() -> None:
    for path in (".venv", ".git", "tests", "bench", ".tools", "services/gateway/__pycache__"):
        assert not dockerignore_includes(path), path


def healthcheck(*args: str, **env: str) -> int:
    proc = subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args],
        env={**os.environ, **env},
        capture_output=True,
        timeout=30,
    )
    return proc.returncode


@pytest.mark.stack
def test_healthcheck_script_reports_what_the_services_report(synthetic_stack: LocalStack) -> None:
    p = synthetic_stack.ports
    assert healthcheck("http", ANTIPHON_PORT=str(p.gateway)) == 0
    assert healthcheck("http", "/readyz", ANTIPHON_PORT=str(p.gateway)) == 0
    for port, service in (
        (p.session, "antiphon.v1.SessionService"),
        (p.stage0, "antiphon.v1.Stage0Service"),
        (p.stage1, "antiphon.v1.Stage1Service"),
    ):
        assert healthcheck("grpc", ANTIPHON_LISTEN=f"0.0.0.0:{port}") == 0
        assert healthcheck("grpc", service, ANTIPHON_LISTEN=f"0.0.0.0:{port}") == 0
    # A service name the server does not know is not healthy.
    assert healthcheck("grpc", "no.such.Service", ANTIPHON_LISTEN=f"0.0.0.0:{p.session}") == 1
    closed = free_port()
    assert healthcheck("grpc", ANTIPHON_LISTEN=f"0.0.0.0:{closed}") == 1
    assert healthcheck("http", ANTIPHON_PORT=str(closed)) == 1
    assert healthcheck("bogus") == 2
