"""Fixtures of the deploy tests: the tools they run (`tests/deploy/tools.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy import tools
from tests.support import tiers


@pytest.fixture(scope="session")
def helm(request: pytest.FixtureRequest) -> Path:
    tiers.require(request, tiers.NPM, "runs helm, which `make deploy-tools` installs from npm")
    return tools.helm()


@pytest.fixture(scope="session")
def docker_compose() -> Path:
    return tools.docker_compose()


@pytest.fixture(scope="session")
def kubernetes_validate() -> Path:
    return tools.kubernetes_validate()
