"""Every deploy profile names only settings that exist: a misspelt key would be
ignored silently (settings ignore unknown keys) and the default would win."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from antiphon.common.config import ServiceSettings
from antiphon.gateway.settings import GatewaySettings
from antiphon.session.settings import SessionSettings
from antiphon.stage0.settings import Stage0Settings
from antiphon.stage1.settings import Stage1Settings
from tests.deploy.tools import REPO

SECTIONS: dict[str, type[ServiceSettings]] = {
    "common": ServiceSettings,
    "gateway": GatewaySettings,
    "session": SessionSettings,
    "stage0": Stage0Settings,
    "stage1": Stage1Settings,
}
CHART = REPO / "deploy" / "helm" / "antiphon"


def unknown_keys(profile: dict[str, Any]) -> list[str]:
    out = []
    for section, values in profile.items():
        if section not in SECTIONS:
            out.append(section)
            continue
        out += [f"{section}.{k}" for k in values or {} if k not in SECTIONS[section].model_fields]
    return out


@pytest.mark.parametrize(
    "name", ["local.yaml", "compose.yaml", "duplex.yaml", "gpu.yaml", "nemotron.yaml"]
)
def test_profile_files_name_only_real_settings(name: str) -> None:
    profile = yaml.safe_load((REPO / "deploy" / "profiles" / name).read_text())
    assert not unknown_keys(profile)


@pytest.mark.npm
@pytest.mark.parametrize(
    "values", [(), ("-f", str(CHART / "values-gpu.yaml"))], ids=["default", "gpu"]
)
def test_the_chart_profile_names_only_real_settings(helm: Path, values: tuple[str, ...]) -> None:
    proc = subprocess.run(
        [
            str(helm),
            "template",
            "rel",
            str(CHART),
            *values,
            "-s",
            "templates/profile-configmap.yaml",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    profile = yaml.safe_load(yaml.safe_load(proc.stdout)["data"]["profile.yaml"])
    assert not unknown_keys(profile)


def test_compose_profile_loads_into_every_service(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("ANTIPHON_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ANTIPHON_PROFILE", str(REPO / "deploy" / "profiles" / "compose.yaml"))
    for name, cls in SECTIONS.items():
        assert cls().otlp_endpoint == "http://otel-collector:4317", name
    session = SessionSettings()
    assert session.redis_url == "redis://redis:6379/0"
    assert "stage0-gpu:50061" in session.stage0_addresses
    assert GatewaySettings().session_address == "session:50051"
    assert Stage0Settings().model_cache == Path("/models")
