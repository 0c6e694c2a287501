"""deploy/helm/antiphon: lints, renders with default and GPU values into manifests
that pass the Kubernetes schemas, and refuses impossible values."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helm_render import (
    CHART,
    COMPONENTS,
    GPU_VALUES,
    GRPC_SERVICES,
    KUBE_VERSIONS,
    container,
    env,
    helm_run,
    manifests,
    one,
    render,
)
from tests.deploy.tools import REPO

# Every test here runs helm, which comes from npm (`make deploy-tools`).
pytestmark = pytest.mark.npm


@pytest.mark.parametrize("values", [(), ("-f", str(GPU_VALUES))], ids=["default", "gpu"])
def test_helm_lint_passes_strict(helm: Path, values: tuple[str, ...]) -> None:
    proc = helm_run(helm, "lint", "--strict", str(CHART), *values)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Every optional template switched on: ingress, auth secret, external Redis from
# a Secret, a model volume, fixed replicas, a runtime class, tracing.
OPTIONAL: dict[str, Any] = {
    "gateway": {
        "apiKeySecret": {"name": "antiphon-api-key", "key": "api-key"},
        "apiKeysSecret": {"name": "antiphon-api-keys", "key": "keys"},
        "clientSecretSigningKeySecret": {"name": "antiphon-signing-key"},
        "ingress": {
            "enabled": True,
            "className": "nginx",
            "hosts": [{"host": "speech.example.com", "paths": [{"path": "/"}]}],
            "tls": [{"secretName": "speech-tls", "hosts": ["speech.example.com"]}],
        },
    },
    "session": {"autoscaling": {"enabled": False}, "pdb": {"maxUnavailable": "50%"}},
    "stage0": {"models": {"existingClaim": "antiphon-models"}, "runtimeClassName": "nvidia"},
    "redis": {"enabled": False, "externalUrlSecret": {"name": "redis", "key": "url"}},
    "tracing": {"otlpEndpoint": "http://otel-collector.observability:4317"},
}
VALUE_SETS: dict[str, list[Path | str]] = {
    "default": [],
    "gpu": [GPU_VALUES],
    "optional": [GPU_VALUES, "optional"],
}


def values_args(name: str, tmp_path: Path) -> list[str]:
    args = []
    for item in VALUE_SETS[name]:
        if item == "optional":
            path = tmp_path / "optional.yaml"
            path.write_text(yaml.safe_dump(OPTIONAL))
            item = path
        args += ["-f", str(item)]
    return args


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_rendered_manifests_pass_the_kubernetes_schemas_strictly(
    helm: Path, kubernetes_validate: Path, tmp_path: Path, values: str, kube: str
) -> None:
    out = tmp_path / "rendered.yaml"
    out.write_text(render(helm, *values_args(values, tmp_path)))
    proc = subprocess.run(
        [str(kubernetes_validate), "--strict", "--kubernetes-version", kube, "--quiet", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # --quiet prints only problems; a resource it could not check is a problem here.
    assert "Couldn't find schema" not in proc.stdout + proc.stderr


def test_optional_templates_render_what_they_promise(helm: Path, tmp_path: Path) -> None:
    items = manifests(helm, *values_args("optional", tmp_path))
    ingress = one(items, "Ingress", "rel-antiphon-gateway")
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "rel-antiphon-gateway", "port": {"number": 8000}}
    gw = env(container(one(items, "Deployment", "rel-antiphon-gateway")))
    assert gw["ANTIPHON_API_KEY"] == {
        "secretKeyRef": {"name": "antiphon-api-key", "key": "api-key"}
    }
    assert gw["ANTIPHON_OTLP_ENDPOINT"] == "http://otel-collector.observability:4317"
    # The keys file is the Secret, mounted read-only where the setting points.
    gateway = one(items, "Deployment", "rel-antiphon-gateway")["spec"]["template"]["spec"]
    assert gw["ANTIPHON_API_KEYS_FILE"] == "/etc/antiphon-keys/keys"
    assert {"name": "api-keys", "secret": {"secretName": "antiphon-api-keys"}} in gateway["volumes"]
    assert {"name": "api-keys", "mountPath": "/etc/antiphon-keys", "readOnly": True} in container(
        {"spec": {"template": {"spec": gateway}}}
    )["volumeMounts"]
    assert gw["ANTIPHON_CLIENT_SECRET_SIGNING_KEY"] == {
        "secretKeyRef": {"name": "antiphon-signing-key", "key": "signing-key"}
    }
    session = env(container(one(items, "Deployment", "rel-antiphon-session")))
    assert session["ANTIPHON_REDIS_URL"] == {"secretKeyRef": {"name": "redis", "key": "url"}}
    stage0 = one(items, "Deployment", "rel-antiphon-stage0")["spec"]["template"]["spec"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in container(
        {"spec": {"template": {"spec": stage0}}}
    )["volumeMounts"]
    assert stage0["runtimeClassName"] == "nvidia"


def test_every_tier_has_a_deployment_service_hpa_and_pdb(helm: Path) -> None:
    items = manifests(helm)
    for component in COMPONENTS:
        name = f"rel-antiphon-{component}"
        deployment = one(items, "Deployment", name)
        one(items, "Service", name)
        hpa = one(items, "HorizontalPodAutoscaler", name)
        pdb = one(items, "PodDisruptionBudget", name)
        assert hpa["spec"]["scaleTargetRef"]["name"] == name
        # Helm and the HPA must not fight over the replica count.
        assert "replicas" not in deployment["spec"], component
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert pdb["spec"]["selector"]["matchLabels"] == selector
        assert deployment["spec"]["template"]["metadata"]["labels"].items() >= selector.items()


def test_replicas_are_set_when_autoscaling_is_off(helm: Path) -> None:
    items = manifests(helm, "--set", "session.autoscaling.enabled=false")
    assert one(items, "Deployment", "rel-antiphon-session")["spec"]["replicas"] == 2
    hpas = {m["metadata"]["name"] for m in items if m["kind"] == "HorizontalPodAutoscaler"}
    assert "rel-antiphon-session" not in hpas and "rel-antiphon-gateway" in hpas


def test_gateway_and_session_scale_on_cpu_and_stage_workers_on_bound_sessions(helm: Path) -> None:
    items = manifests(helm)
    for component in ("gateway", "session"):
        (metric,) = one(items, "HorizontalPodAutoscaler", f"rel-antiphon-{component}")["spec"][
            "metrics"
        ]
        assert metric["type"] == "Resource" and metric["resource"]["name"] == "cpu"
    for stage in ("stage0", "stage1"):
        (metric,) = one(items, "HorizontalPodAutoscaler", f"rel-antiphon-{stage}")["spec"][
            "metrics"
        ]
        assert metric["type"] == "Pods"
        assert metric["pods"]["metric"]["name"] == f"antiphon_{stage}_sessions_active"


def test_probes_are_native_grpc_for_grpc_services_and_http_for_the_gateway(helm: Path) -> None:
    items = manifests(helm)
    gw = container(one(items, "Deployment", "rel-antiphon-gateway"))
    assert gw["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gw["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for component, service in GRPC_SERVICES.items():
        c = container(one(items, "Deployment", f"rel-antiphon-{component}"))
        port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
        assert env(c)["ANTIPHON_LISTEN"] == f"0.0.0.0:{port}"
        assert c["readinessProbe"]["grpc"] == {"port": port, "service": service}
        # Liveness asks "alive" only: a worker waiting on Redis or models is not restarted.
        assert c["livenessProbe"]["grpc"] == {"port": port, "service": ""}
        assert "startupProbe" in c
    stage0 = container(one(items, "Deployment", "rel-antiphon-stage0"))
    startup = stage0["startupProbe"]
    # Model loading: the startup window is minutes, and asks for the models to be loaded.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    assert startup["grpc"]["service"] == "antiphon.v1.Stage0Service"


def test_pods_are_non_root_with_a_read_only_root_and_a_drain_window(helm: Path) -> None:
    items = manifests(helm)
    profile = yaml.safe_load(
        one(items, "ConfigMap", "rel-antiphon-profile")["data"]["profile.yaml"]
    )
    for component in COMPONENTS:
        spec = one(items, "Deployment", f"rel-antiphon-{component}")["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        c = container({"spec": {"template": {"spec": spec}}})
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]
        assert spec["terminationGracePeriodSeconds"] > profile["common"]["shutdown_grace_s"]
        assert env(c)["ANTIPHON_PROFILE"] == "/etc/antiphon/profile.yaml"


def test_session_is_wired_to_redis_and_both_stages(helm: Path) -> None:
    items = manifests(helm)
    e = env(container(one(items, "Deployment", "rel-antiphon-session")))
    assert e["ANTIPHON_REDIS_URL"] == "redis://rel-antiphon-redis:6379/0"
    assert e["ANTIPHON_STAGE0_ADDRESSES"] == '["rel-antiphon-stage0:50061"]'
    assert e["ANTIPHON_STAGE1_ADDRESSES"] == '["rel-antiphon-stage1:50071"]'
    gw = env(container(one(items, "Deployment", "rel-antiphon-gateway")))
    assert gw["ANTIPHON_SESSION_ADDRESS"] == "rel-antiphon-session:50051"
    for stage in ("session", "stage0", "stage1"):
        # Headless: the name resolves to every ready pod, not one virtual IP.
        assert one(items, "Service", f"rel-antiphon-{stage}")["spec"]["clusterIP"] == "None"


def test_stage_workers_register_in_redis_under_their_pod_ip(helm: Path) -> None:
    items = manifests(helm)
    for stage, port in (("stage0", 50061), ("stage1", 50071)):
        c = container(one(items, "Deployment", f"rel-antiphon-{stage}"))
        e = env(c)
        assert e["ANTIPHON_REDIS_URL"] == "redis://rel-antiphon-redis:6379/0"
        assert e["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert e["ANTIPHON_ADVERTISE_ADDRESS"] == f"$(POD_IP):{port}"
        # Kubernetes expands $(POD_IP) only from a variable defined before it.
        names = [v["name"] for v in c["env"]]
        assert names.index("POD_IP") < names.index("ANTIPHON_ADVERTISE_ADDRESS")


def test_in_chart_redis_has_aof_and_a_volume_claim(helm: Path) -> None:
    redis = one(manifests(helm), "StatefulSet", "rel-antiphon-redis")
    args = container(redis)["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert args[args.index("--appendfsync") + 1] == "everysec"
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"


def test_external_redis_replaces_the_statefulset(helm: Path) -> None:
    url = "redis://cache.data:6379/3"
    items = manifests(helm, "--set", "redis.enabled=false", "--set", f"redis.externalUrl={url}")
    assert not [m for m in items if m["kind"] == "StatefulSet"]
    assert (
        env(container(one(items, "Deployment", "rel-antiphon-session")))["ANTIPHON_REDIS_URL"]
        == url
    )


def test_gpu_values_put_stage0_on_gpu_nodes_with_the_cuda_image(helm: Path) -> None:
    default = manifests(helm)
    assert "nvidia.com/gpu" not in yaml.safe_dump_all(default)
    items = manifests(helm, "-f", str(GPU_VALUES))
    spec = one(items, "Deployment", "rel-antiphon-stage0")["spec"]["template"]["spec"]
    c = container({"spec": {"template": {"spec": spec}}})
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert c["image"].split(":")[0].endswith("stage0-cuda")
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]


def test_a_profile_change_rolls_the_pods(helm: Path) -> None:
    def checksum(*args: str) -> str:
        d = one(manifests(helm, *args), "Deployment", "rel-antiphon-session")
        return str(d["spec"]["template"]["metadata"]["annotations"]["checksum/profile"])

    assert checksum() != checksum("--set", "profile.session.max_sessions=65")


def test_service_monitors_only_with_the_operator_and_on_real_ports(helm: Path) -> None:
    assert not [m for m in manifests(helm) if m["kind"] == "ServiceMonitor"]
    items = manifests(helm, "--api-versions", "monitoring.coreos.com/v1")
    monitors = [m for m in items if m["kind"] == "ServiceMonitor"]
    assert len(monitors) == len(COMPONENTS)
    services = [m for m in items if m["kind"] == "Service"]
    for monitor in monitors:
        want = monitor["spec"]["selector"]["matchLabels"]
        (svc,) = [s for s in services if s["metadata"]["labels"].items() >= want.items()]
        ports = {p["name"] for p in svc["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in ports and endpoint["path"] == "/metrics"


def test_dashboards_ship_as_a_configmap_for_the_grafana_sidecar(helm: Path) -> None:
    cm = one(manifests(helm), "ConfigMap", "rel-antiphon-dashboards")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    files = sorted((REPO / "deploy" / "grafana" / "dashboards").glob("*.json"))
    assert files
    assert sorted(cm["data"]) == [f.name for f in files]
    for f in files:
        assert (
            hashlib.sha256(cm["data"][f.name].encode()).digest()
            == hashlib.sha256(f.read_bytes()).digest()
        )


def test_install_notes_say_how_to_connect(helm: Path) -> None:
    proc = helm_run(helm, "install", "rel", str(CHART), "--dry-run=client", "-n", "speech")
    assert proc.returncode == 0, proc.stderr
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "port-forward svc/rel-antiphon-gateway" in notes
    assert "ws://127.0.0.1:8000/v1/realtime" in notes


IMPOSSIBLE = {
    "hpa_min_above_max": (
        {"gateway": {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}},
        "gateway.autoscaling.minReplicas (5) is above maxReplicas (2)",
    ),
    "grace_shorter_than_drain": (
        {"session": {"terminationGracePeriodSeconds": 10}},
        "session.terminationGracePeriodSeconds (10) must exceed",
    ),
    "stage_target_above_capacity": (
        {
            "stage0": {
                "autoscaling": {
                    "podsMetrics": [
                        {"name": "antiphon_stage0_sessions_active", "averageValue": "10"}
                    ]
                }
            }
        },
        "stage0.autoscaling: target 10 sessions per worker is above profile.stage0.capacity",
    ),
    "pdb_blocks_every_drain": (
        {
            "stage1": {
                "autoscaling": {"enabled": False},
                "pdb": {"minAvailable": 1, "maxUnavailable": None},
            }
        },
        "stage1.pdb.minAvailable (1) must be below the replica count (1)",
    ),
    "no_redis_at_all": ({"redis": {"enabled": False}}, "set redis.externalUrl"),
    "redis_without_fsync": ({"redis": {"appendfsync": "no"}}, "redis.appendfsync (no)"),
    "front_ends_without_a_session_each": (
        {"profile": {"stage0": {"llm_front_ends": 4, "capacity": 3}}},
        "profile.stage0.capacity (3) leaves some of the 4 front ends",
    ),
    "front_ends_on_the_synthetic_backend": (
        {"profile": {"stage0": {"llm_front_ends": 2, "backend": "synthetic"}}},
        "the synthetic backend has none",
    ),
    "front_end_ports_overlap": (
        {
            "profile": {"stage0": {"llm_front_ends": 4}},
            "stage0": {"service": {"port": 9000, "metricsPort": 9002}},
        },
        "stage0.service.port (9000) and metricsPort (9002)",
    ),
    "duplex_front_ends_on_the_cascade": (
        {"profile": {"stage0": {"duplex_front_ends": 2}}},
        "shares a duplex stepper: the cascade backend has none",
    ),
    "duplex_and_llm_front_ends_at_once": (
        {"profile": {"stage0": {"duplex_front_ends": 2, "llm_front_ends": 2, "backend": "moshi"}}},
        "duplex_front_ends and llm_front_ends cannot both be above 1",
    ),
    "stage1_duplex_front_ends_on_piper": (
        {"profile": {"stage1": {"duplex_front_ends": 2}}},
        "profile.stage1.duplex_front_ends (2) shares a duplex stepper: the piper backend",
    ),
    "stage1_duplex_front_ends_and_worker_processes_at_once": (
        {"profile": {"stage1": {"duplex_front_ends": 2, "worker_processes": 2, "backend": "mimi"}}},
        "profile.stage1.duplex_front_ends and worker_processes cannot both be above 1",
    ),
    "stage1_duplex_front_ends_without_a_session_each": (
        {"profile": {"stage1": {"duplex_front_ends": 5, "capacity": 4, "backend": "mimi"}}},
        "profile.stage1.capacity (4) leaves some of the 5 front ends (duplex_front_ends)",
    ),
    "duplex_front_ends_without_a_session_each": (
        {"profile": {"stage0": {"duplex_front_ends": 4, "capacity": 3, "backend": "moshi"}}},
        "profile.stage0.capacity (3) leaves some of the 4 front ends (duplex_front_ends)",
    ),
    "stage1_processes_without_a_session_each": (
        {"profile": {"stage1": {"worker_processes": 4, "capacity": 3}}},
        "profile.stage1.capacity (3) leaves some of the 4 worker processes",
    ),
    "stage1_processes_on_mimi": (
        {"profile": {"stage1": {"worker_processes": 2, "backend": "mimi"}}},
        "one lockstep batch",
    ),
    "stage1_process_ports_overlap": (
        {
            "profile": {"stage1": {"worker_processes": 4}},
            "stage1": {"service": {"port": 9000, "metricsPort": 9002}},
        },
        "stage1.service.port (9000) and metricsPort (9002)",
    ),
    "hpa_without_metric": (
        {"gateway": {"autoscaling": {"targetCPUUtilizationPercentage": None}}},
        "gateway.autoscaling is enabled with no metric",
    ),
}


@pytest.mark.parametrize("case", sorted(IMPOSSIBLE))
def test_impossible_values_fail_the_render_with_a_message_naming_them(
    helm: Path, tmp_path: Path, case: str
) -> None:
    values, message = IMPOSSIBLE[case]
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    proc = helm_run(helm, "template", "rel", str(CHART), "-f", str(path))
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
