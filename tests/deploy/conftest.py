"""Fixtures of the deploy tests: the tools they run, installed by the test setup itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy import tools


@pytest.fixture(scope="session")
def helm() -> Path:
    return tools.helm()


@pytest.fixture(scope="session")
def docker_compose() -> Path:
    return tools.docker_compose()


@pytest.fixture(scope="session")
def kubernetes_validate() -> Path:
    return tools.kubernetes_validate()
