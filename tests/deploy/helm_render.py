"""Rendering deploy/helm/antiphon with helm and picking its manifests apart:
what the chart's tests (test_helm.py, test_helm_processes.py) share."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.tools import REPO

CHART = REPO / "deploy" / "helm" / "antiphon"
GPU_VALUES = CHART / "values-gpu.yaml"
COMPONENTS = ("gateway", "session", "stage0", "stage1")
GRPC_SERVICES = {
    "session": "antiphon.v1.SessionService",
    "stage0": "antiphon.v1.Stage0Service",
    "stage1": "antiphon.v1.Stage1Service",
}
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest schemas bundled.
KUBE_VERSIONS = ("1.30.0", "1.37.0")
Manifest = dict[str, Any]


def helm_run(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, cwd=REPO)


def render(helm: Path, *args: str) -> str:
    proc = helm_run(helm, "template", "rel", str(CHART), "--namespace", "speech", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def manifests(helm: Path, *args: str) -> list[Manifest]:
    return [m for m in yaml.safe_load_all(render(helm, *args)) if m]


def one(items: list[Manifest], kind: str, name: str) -> Manifest:
    (found,) = [m for m in items if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def container(deployment: Manifest) -> Manifest:
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c  # type: ignore[no-any-return]


def env(c: Manifest) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
