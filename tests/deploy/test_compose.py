"""deploy/docker-compose.yml: valid for Compose, with and without the gpu profile,
and wired the way the services and Prometheus expect."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.tools import REPO

COMPOSE = REPO / "deploy" / "docker-compose.yml"
LOCAL = REPO / "deploy" / "docker-compose.local.yml"
ANTIPHON = {"gateway", "session", "stage0", "stage1"}
# Metrics port of each service, as its Dockerfile and the profile set them.
METRICS_PORTS = {
    "gateway": 8000,
    "session": 9101,
    "stage0": 9111,
    "stage0-gpu": 9111,
    "stage1": 9121,
}


def compose(
    docker_compose: Path, *args: str, env: dict[str, str] | None = None, local: bool = False
) -> str:
    files = ["-f", str(COMPOSE), *(["-f", str(LOCAL)] if local else [])]
    proc = subprocess.run(
        [str(docker_compose), *files, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def config(docker_compose: Path, *profile: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(
        compose(docker_compose, *profile, "config", "--format", "json")
    )
    return out


@pytest.mark.parametrize("profile", [(), ("--profile", "gpu")], ids=["cpu", "gpu"])
def test_compose_config_is_valid(docker_compose: Path, profile: tuple[str, ...]) -> None:
    compose(docker_compose, *profile, "config", "-q")


def test_default_runs_cpu_workers_and_the_gpu_profile_adds_a_gpu_stage0(
    docker_compose: Path,
) -> None:
    cpu = config(docker_compose)["services"]
    assert ANTIPHON | {"redis", "prometheus", "grafana", "otel-collector"} <= set(cpu)
    assert "stage0-gpu" not in cpu
    gpu = config(docker_compose, "--profile", "gpu")["services"]["stage0-gpu"]
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert gpu["build"]["dockerfile"] == "services/stage0/Dockerfile.cuda"


def test_redis_keeps_an_aof_on_a_volume(docker_compose: Path) -> None:
    redis = config(docker_compose)["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "everysec"
    assert any(v["type"] == "volume" and v["target"] == "/data" for v in redis["volumes"])


def test_antiphon_containers_are_read_only_and_read_the_compose_profile(
    docker_compose: Path,
) -> None:
    services = config(docker_compose, "--profile", "gpu")["services"]
    for name in (*ANTIPHON, "stage0-gpu"):
        svc = services[name]
        assert svc["read_only"] is True, name
        assert svc["environment"]["ANTIPHON_PROFILE"] == "/etc/antiphon/profile.yaml", name
        mounts = {v["target"]: v for v in svc["volumes"]}
        profile = mounts["/etc/antiphon/profile.yaml"]
        assert profile["read_only"] and Path(profile["source"]).samefile(
            REPO / "deploy" / "profiles" / "compose.yaml"
        )
        assert (REPO / svc["build"]["dockerfile"]).is_file(), name


def test_prometheus_scrapes_every_service_on_its_metrics_port() -> None:
    prom = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    scraped = {}
    for job in prom["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            for name in sd["names"]:
                scraped[name] = sd["port"]
    for name, port in METRICS_PORTS.items():
        assert scraped.get(name) == port, name


def test_grafana_provisioning_points_at_the_mounted_dashboards(docker_compose: Path) -> None:
    grafana = config(docker_compose)["services"]["grafana"]
    mounts = {Path(v["source"]).resolve(): v["target"] for v in grafana["volumes"] if "source" in v}
    dashboards = mounts[(REPO / "deploy" / "grafana" / "dashboards").resolve()]
    provider = yaml.safe_load(
        (REPO / "deploy" / "grafana" / "provisioning" / "dashboards" / "antiphon.yaml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == dashboards
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (REPO / "deploy" / "grafana" / "dashboards" / Path(home).name).is_file()
    datasources = yaml.safe_load(
        (REPO / "deploy" / "grafana" / "provisioning" / "datasources" / "antiphon.yaml").read_text()
    )
    assert {d["type"] for d in datasources["datasources"]} >= {"prometheus"}


def test_collector_pipelines_only_name_components_it_defines() -> None:
    cfg = yaml.safe_load((REPO / "deploy" / "otel" / "collector.yaml").read_text())
    assert cfg["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(":4317")
    for pipeline in cfg["service"]["pipelines"].values():
        for kind in ("receivers", "processors", "exporters"):
            assert set(pipeline.get(kind, [])) <= set(cfg.get(kind, {})), (kind, pipeline)
    profile = yaml.safe_load((REPO / "deploy" / "profiles" / "compose.yaml").read_text())
    assert profile["common"]["otlp_endpoint"] == "http://otel-collector:4317"


def test_the_local_override_boots_with_no_image_pulled(docker_compose: Path) -> None:
    """deploy/docker-compose.local.yml (`make compose-check`, a machine with no
    registry): every service that starts is built here; what Debian does not
    package waits for `--profile observability`; nothing exports spans to a
    collector that is not there."""
    env = {"PATH": "/usr/bin:/bin", "PYTHON_IMAGE": "antiphon/python:3.11-bookworm"}
    services = json.loads(
        compose(docker_compose, "config", "--format", "json", env=env, local=True)
    )["services"]
    assert set(services) == ANTIPHON | {"redis", "prometheus"}
    for name, svc in services.items():
        assert "build" in svc, f"{name} would be pulled"
        assert svc["build"]["args"]["PYTHON_IMAGE"] == env["PYTHON_IMAGE"], name
        dockerfile = Path(svc["build"]["context"]) / svc["build"]["dockerfile"]
        assert dockerfile.is_file(), name
    for name in ANTIPHON:
        assert services[name]["environment"]["ANTIPHON_OTLP_ENDPOINT"] == "", name
    full = json.loads(
        compose(
            docker_compose, "--profile", "observability", "config", "--format", "json", env=env,
            local=True,
        )
    )["services"]  # fmt: skip
    assert {"grafana", "jaeger", "otel-collector"} <= set(full)


def test_build_arguments_come_from_the_shell_only_when_set(docker_compose: Path) -> None:
    """Unset, the Dockerfiles' defaults (python:3.11-slim-bookworm, PyTorch's
    CPU index) hold; an empty TORCH_INDEX_URL is passed as empty."""
    bare = {"PATH": "/usr/bin:/bin"}
    unset = json.loads(compose(docker_compose, "config", "--format", "json", env=bare))["services"]
    for name in ANTIPHON:
        assert not unset[name]["build"].get("args"), name
    env = {**bare, "PYTHON_IMAGE": "base:1", "TORCH_INDEX_URL": ""}
    given = json.loads(compose(docker_compose, "config", "--format", "json", env=env))["services"]
    assert given["stage0"]["build"]["args"] == {"PYTHON_IMAGE": "base:1", "TORCH_INDEX_URL": ""}
    assert given["gateway"]["build"]["args"] == {"PYTHON_IMAGE": "base:1"}
